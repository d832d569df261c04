"""Torch programs that share jobs: most of a job's time is starting its processes and
importing torch (DDP's first use imports torch._dynamo: about a second per process), so the
programs of several modules run in a few jobs (``programs.several``), each started once per
session by whichever test asks first."""

from __future__ import annotations

from typing import Any

import pytest

#: The differential programs, in two jobs per backend (world 2 and world 4): (label, program,
#: kwargs). test_training compares most of them with gloo; test_torch_api the subgroups one.
PLANS = {
    2: [("ddp", "ddp_train", {}), ("ddp_allreduce_hook", "ddp_train", {"hook": "allreduce"}),
        ("ddp_fp16_hook", "ddp_train", {"hook": "fp16"}),
        ("ddp_powersgd_hook", "ddp_powersgd", {}),
        ("ddp_sparse", "ddp_sparse_embedding", {}), ("fsdp2", "fsdp2_train", {}),
        ("fsdp1", "fsdp1_train", {}), ("dtensor", "dtensor_redistribute", {}),
        ("functional", "functional_collectives", {}), ("async", "async_overlap", {}),
        ("coalesced", "coalesced_forms", {}), ("async_patterns", "async_patterns", {})],
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


def _cached(cache: dict, key: tuple, backend: str, world_size: int, plan: list) -> list[dict[str, Any]]:
    from . import harness

    pytest.importorskip("torch")
    if key not in cache:
        try:
            cache[key] = harness.run("several", backend, world_size, timeout=300, plan=plan)
        except harness.ProgramFailed as exc:
            cache[key] = exc
    if isinstance(cache[key], Exception):
        pytest.fail(str(cache[key]), pytrace=False)
    return cache[key]


def _plan(backend: str, world_size: int) -> list:
    return PLANS[world_size] + (ACCORD_PLAN if (backend, world_size) == ("accord", 2) else [])


@pytest.fixture(scope="session")
def jobs() -> Any:
    """(backend, world size) → every rank's {label: result} of its plan: ``PLANS[world
    size]``, and ``ACCORD_PLAN`` after it on accord at world 2."""
    cache: dict[tuple, Any] = {}
    return lambda backend, world_size: _cached(cache, (backend, world_size), backend, world_size,
                                               _plan(backend, world_size))


@pytest.fixture(scope="session")
def accord_programs(jobs) -> Any:
    """label of ``ACCORD_PLAN`` → every rank's result of that program (world 2, accord)."""
    return lambda label: [r[label] for r in jobs("accord", 2)]
