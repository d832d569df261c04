"""The error survey: for every bad call of scripts_errors, accord's exception is caught by the
``except`` clause that catches torch.distributed's (gloo) for the same call, on every rank.

torch raises ValueError, RuntimeError, TypeError or IndexError for the same kinds of mistake
depending on where it checks; accord raises ``ArgumentError`` (a ValueError and a
RuntimeError), ``ArgumentTypeError`` (also a TypeError) or ``ShortListError`` (also an
IndexError), see ``accord.errors``. Each case compares the name of torch's class with the
names in accord's MRO (torch's ``DistBackendError`` has an accord namesake).

Where the two do not both raise, the difference is listed here and expected explicitly:
``ACCORD_ONLY`` (torch does not raise; accord refuses, and says why), ``TORCH_ONLY`` (torch
raises; accord does not), and ``scripts_errors.TORCH_DIES`` (torch crashes or hangs; accord
raises an ArgumentError). A listed difference that goes away fails the test, so the lists
stay true. Calls made before ``init_process_group`` run in this process, on both.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from . import runner, scripts_errors  # noqa: E402 — after the importorskip

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

WORLD_SIZE = 2
ACCORD = ("accord-numpy", "accord-torch", "accord-mpi")

#: case → why accord raises where torch (gloo) does not (accord's error is kept).
ACCORD_ONLY: dict[str, str] = {
    "all_to_all_single_uneven_without_splits":
        "5 rows cannot be split evenly between 2 ranks; gloo sends 2 rows each and drops one",
    "destroyed_group":
        "a call on a group this rank destroyed is refused (DestroyedGroupError); gloo runs it "
        "only because every member happens to make the same call after destroying it",
}
#: (case, rank) → why accord does not raise where torch does.
TORCH_ONLY: dict[tuple[str, int], str] = {
    ("broadcast_src_not_in_group", 1):
        "a non-member's call returns None with a warning, whatever src is (torch translates "
        "src through the group first and raises ValueError)",
}
#: The class accord raises where torch dies.
AFTER_TORCH_DIES = "ArgumentError"


def names_for(impl: str) -> list[str]:
    return scripts_errors.names(on_torch_gloo=impl == "torch-gloo")


SHARED_JOBS = runner.SharedJobs(names_for, [(WORLD_SIZE, impl) for impl in ("torch-gloo", *ACCORD)])


@pytest.fixture(scope="module")
def runs() -> Callable[[str], runner.JobResult]:
    get = SHARED_JOBS.cache()
    return lambda impl: get(impl, WORLD_SIZE)

def outcomes(job: runner.JobResult, case: str) -> list[dict]:
    return runner.script_results(job, scripts_errors.PREFIX + case)


def differences(torch_res: list[dict], accord_res: list[dict], case: str) -> list[str]:
    """What is wrong with accord's outcome of ``case``, rank by rank."""
    problems = []
    for rank, (t, a) in enumerate(zip(torch_res, accord_res)):
        theirs, ours = t["raised"], a["raised"]
        if theirs is not None and ours is not None:
            if theirs[0] not in ours:
                problems.append(f"rank {rank}: torch raised {theirs[0]} ({t['message']!r}), accord "
                                f"{ours[0]} (bases {ours[1:]}), which `except {theirs[0]}` misses")
        elif theirs is not None and (case, rank) not in TORCH_ONLY:
            problems.append(f"rank {rank}: torch raised {theirs[0]} ({t['message']!r}), accord "
                            f"did not raise")
        elif ours is not None and theirs is None and case not in ACCORD_ONLY:
            problems.append(f"rank {rank}: accord raised {ours[0]} ({a['message']!r}), torch did "
                            f"not: list the case in ACCORD_ONLY with the reason")
    return problems


def _torch_cases() -> list[Any]:
    return [pytest.param(impl, case, id=f"{impl}-{case}") for impl in ACCORD
            for case in scripts_errors.CASES if case not in scripts_errors.TORCH_DIES]


@pytest.mark.parametrize(("impl", "case"), _torch_cases())
def test_caught_where_torchs_is(runs, impl: str, case: str) -> None:
    torch_res = outcomes(runs("torch-gloo"), case)
    accord_res = outcomes(runs(impl), case)
    problems = differences(torch_res, accord_res, case)
    assert not problems, f"{case} ({impl}):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("impl", ACCORD)
def test_listed_differences_are_still_true(runs, impl: str) -> None:
    """Every listed difference still holds: a fix shows up here, and the list is trimmed."""
    torch_job, accord_job = runs("torch-gloo"), runs(impl)
    for case in ACCORD_ONLY:
        t, a = outcomes(torch_job, case), outcomes(accord_job, case)
        assert all(r["raised"] is None for r in t), f"{case}: torch raises now"
        assert all(r["raised"] and "ArgumentError" in r["raised"] for r in a), (case, a)
    for case, rank in TORCH_ONLY:
        t, a = outcomes(torch_job, case)[rank], outcomes(accord_job, case)[rank]
        assert t["raised"] is not None and a["raised"] is None, (case, rank, t, a)


@pytest.mark.parametrize("impl", ACCORD)
@pytest.mark.parametrize("case", sorted(scripts_errors.TORCH_DIES))
def test_where_torch_dies_accord_raises(runs, impl: str, case: str) -> None:
    for rank, res in enumerate(outcomes(runs(impl), case)):
        assert res["raised"] is not None and AFTER_TORCH_DIES in res["raised"], (rank, res)
        assert {"ValueError", "RuntimeError"} <= set(res["raised"]), res


# -- before init_process_group, in this process ----------------------------------------------

#: Calls where accord's class is known to differ, with the reason (outside this module's
#: reach); strict, so that a fix shows up as XPASS.
UNINITIALIZED_DIFFERENCES: dict[str, str] = {}


def raised(fn: Callable[[], Any]) -> BaseException | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as exc:  # noqa: BLE001 — the class is the result
        return exc
    return None


@pytest.mark.parametrize("call", [
    pytest.param(name, marks=[pytest.mark.xfail(strict=True, reason=UNINITIALIZED_DIFFERENCES[name])]
                 if name in UNINITIALIZED_DIFFERENCES else [])
    for name in scripts_errors.UNINITIALIZED])
def test_before_init_process_group(call: str) -> None:
    import numpy as np
    import torch.distributed as torch_dist

    import accord

    assert not torch_dist.is_initialized() and not accord.is_initialized()
    fn = scripts_errors.UNINITIALIZED[call]
    theirs = raised(lambda: fn(torch_dist, torch.ones(2)))
    ours = raised(lambda: fn(accord, np.ones(2)))
    assert theirs is not None, f"torch does not raise for {call} before init"
    assert isinstance(ours, type(theirs)), (f"{call}: torch raises {type(theirs).__name__}, "
                                            f"accord {type(ours).__name__}: {ours}")
