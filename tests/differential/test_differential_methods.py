"""torch's method-level API, the coalesced calls, the private look-ups libraries call and the
``*_multigpu`` collectives (scripts_methods.py) give every rank the same results on accord as
on torch.distributed with gloo: the *_multigpu calls against the same reduction done with
torch's single-tensor collectives on gloo (torch 2.13 has no *_multigpu), each list element
taking part as a device of its own.
"""

from __future__ import annotations

from typing import Callable

import pytest

torch = pytest.importorskip("torch")

from . import runner, scripts_methods  # noqa: E402 — after the importorskip
from .test_docs_examples import mismatches  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

JOBS = [(2, "accord-numpy"), (3, "accord-numpy"), (3, "accord-torch")]


def names_for(impl: str) -> list[str]:
    spec = runner.IMPLEMENTATIONS[impl]
    return scripts_methods.names_for(on_torch_gloo=spec.is_torch_gloo, torch_tensors=spec.torch_tensors)


SHARED_JOBS = runner.SharedJobs(names_for, JOBS + [(ws, "torch-gloo") for ws, _ in JOBS])


@pytest.fixture(scope="module")
def runs() -> Callable[[str, int], runner.JobResult]:
    return SHARED_JOBS.cache()


@pytest.mark.parametrize(("world_size", "impl", "name"),
                         [pytest.param(ws, impl, str(name), id=f"ws{ws}-{impl}-{name}")
                          for ws, impl in JOBS for name in names_for(impl)])
def test_same_as_torch_gloo(runs, world_size: int, impl: str, name: str) -> None:
    theirs = runner.script_results(runs("torch-gloo", world_size), name)
    ours = runner.script_results(runs(impl, world_size), name)
    assert len(ours) == len(theirs) == world_size
    problems = [f"rank {r}{m}" for r, (t, o) in enumerate(zip(theirs, ours)) for m in mismatches(t, o)]
    assert not problems, f"{impl} differs from torch-gloo on {name} at {world_size} ranks:\n  " + \
        "\n  ".join(problems[:20])


def test_multigpu_reference_is_the_closed_form(runs) -> None:
    """The reference itself (torch on gloo) gives the closed forms, so both sides are checked."""
    n, d = 3, scripts_methods.DEVICES
    values = [x % 3 + 1 for x in range(n * d)]
    for rank, got in enumerate(runner.script_results(runs("torch-gloo", n), "methods_multigpu")):
        assert [s["values"] for s in got["all_reduce_SUM"]] == [[sum(values), n * d]] * d
        assert [s["values"] for s in got["all_reduce_MAX"]] == [[3, 1]] * d
