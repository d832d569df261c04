"""Torch programs that share jobs: most of a job's time is starting its processes and
importing torch (DDP's first use imports torch._dynamo: about a second per process), so the
programs of several test modules run in a few jobs (``programs.several``), each started once
per session by whichever test asks first: ``results(backend, world_size)``.
tests/torch_backend/conftest.py offers them as fixtures; tests/frameworks/test_pipelining.py
reads its program's results from here."""

from __future__ import annotations

from typing import Any

import pytest

#: The differential programs, in two jobs per backend (world 2 and world 4): (label, program,
#: kwargs; "module:function" for a program outside programs.py). test_training compares most
#: of them with gloo, test_torch_api the subgroups one, frameworks/test_pipelining the GPipe one.
PLANS = {
    2: [("ddp", "ddp_train", {}), ("ddp_allreduce_hook", "ddp_train", {"hook": "allreduce"}),
        ("ddp_fp16_hook", "ddp_train", {"hook": "fp16"}),
        ("ddp_powersgd_hook", "ddp_powersgd", {}),
        ("ddp_sparse", "ddp_sparse_embedding", {}), ("fsdp2", "fsdp2_train", {}),
        ("fsdp1", "fsdp1_train", {}), ("dtensor", "dtensor_redistribute", {}),
        ("functional", "functional_collectives", {}), ("async", "async_overlap", {}),
        ("coalesced", "coalesced_forms", {}), ("async_patterns", "async_patterns", {}),
        ("gpipe", "frameworks.programs:pipeline_gpipe", {})],
    4: [("ddp_static", "ddp_train", {"static_graph": True, "accumulate": 1}),
        ("async_patterns_4", "async_patterns", {}),
        ("hsdp", "fsdp2_train", {"mesh_shape": (2, 2)}), ("mesh_2d", "device_mesh_2d", {}),
        ("groups_and_names", "groups_and_names", {})],
}
#: Programs on backend accord alone (gloo refuses their calls, or they are about accord's
#: timing) that leave the group working, of test_torch_api and test_diagnostics_and_bad_input:
#: they run after PLANS[2] in accord's world-2 job. (The ones that break their group or need
#: their own settings have a job each.)
ACCORD_PLAN = [(name, name, {}) for name in (
    "ops_and_dtypes", "async_returns_at_once", "backend_calls_without_options", "profiled_async",
    "ddp_overlap", "bad_inputs")]

_CACHE: dict[tuple[str, int], Any] = {}


def plan(backend: str, world_size: int) -> list:
    return PLANS[world_size] + (ACCORD_PLAN if (backend, world_size) == ("accord", 2) else [])


def results(backend: str, world_size: int) -> list[dict[str, Any]]:
    """Every rank's {label: result} of ``plan(backend, world_size)``; the job runs once per
    session (a failed one fails every test that asks for it, with its error)."""
    from . import harness

    pytest.importorskip("torch")
    key = (backend, world_size)
    if key not in _CACHE:
        try:
            _CACHE[key] = harness.run("several", backend, world_size, timeout=300,
                                      plan=plan(backend, world_size))
        except harness.ProgramFailed as exc:
            _CACHE[key] = exc
    if isinstance(_CACHE[key], Exception):
        pytest.fail(str(_CACHE[key]), pytrace=False)
    return _CACHE[key]
