"""The documents' examples (scripts_docs) give every rank the same results on accord as on
torch.distributed (gloo), at 2 and 4 ranks, with NumPy arrays and with torch tensors.

Exceptions compare as ``except`` clauses do: accord's must be an instance of torch's class
(by name, in accord's MRO); their messages are not compared. Where accord differs from torch
on purpose (README, "Where accord does better than gloo"), the test says what each one does
(``DELIBERATE``) instead of comparing. Known differences would be strict xfails (none
now: TCPStore.num_keys counts torch's start-up key, as torch's does).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from . import runner, scripts_docs, scripts_rooted_exchanges  # noqa: E402 — after the importorskip

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

WORLD_SIZES = (2, 4)
ACCORD = ("accord-numpy", "accord-torch", "accord-mpi")
#: accord with torch tensors (the profiler's events included) runs at 4 ranks only: one job
#: less; accord with NumPy arrays runs at both sizes
JOBS = [(2, "accord-numpy"), (4, "accord-numpy"), (4, "accord-torch")]
KNOWN_DIFFERENCES: dict[str, str] = {}


def names_for(impl: str) -> list[str]:
    spec = runner.IMPLEMENTATIONS[impl]
    return scripts_docs.names_for(on_torch_gloo=spec.is_torch_gloo, torch_tensors=spec.torch_tensors)


SHARED_JOBS = runner.SharedJobs(names_for, JOBS + [(ws, "torch-gloo") for ws in WORLD_SIZES])


@pytest.fixture(scope="module")
def runs() -> Callable[[str, int], runner.JobResult]:
    """``runs(impl, world_size)``: that job's results, run at most once per session (the
    jobs are shared with the other differential modules: runner.SharedJobs)."""
    return SHARED_JOBS.cache()


results = runner.script_results


def mismatches(expected: Any, got: Any, path: str = "") -> list[str]:
    """Where ``got`` (accord) differs from ``expected`` (torch); an outcome dict ({"raised":
    [class names], …}) matches when torch's class is among accord's bases."""
    if isinstance(expected, dict) and isinstance(got, dict) and "raised" in expected and "raised" in got:
        theirs, ours = expected["raised"], got["raised"]
        if (theirs is None) != (ours is None) or (theirs and theirs[0] not in ours):
            return [f"{path}: torch raised {theirs and theirs[0]}, accord {ours and ours[0]} "
                    f"({got.get('message', '')!r})"]
        rest = {k: v for k, v in expected.items() if k not in ("raised", "message")}
        return mismatches(rest, {k: v for k, v in got.items() if k not in ("raised", "message")}, path)
    if isinstance(expected, dict) and isinstance(got, dict):
        if expected.keys() != got.keys():
            return [f"{path}: keys {sorted(expected)} != {sorted(got)}"]
        return [m for k in expected for m in mismatches(expected[k], got[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [m for i, (e, g) in enumerate(zip(expected, got)) for m in mismatches(e, g, f"{path}[{i}]")]
    if type(expected) is not type(got) or expected != got:
        return [f"{path}: torch {expected!r}, accord {got!r}"]
    return []


# -- where accord differs on purpose: what each one does -----------------------------------

def reduce_leaves_other_ranks_alone(theirs: list, ours: list, n: int) -> None:
    """seed 002's reduce: the root gets n on both; gloo leaves partial sums in the other ranks'
    tensors (the post prints them: 3.0, 2.0, 1.0 at 4 ranks), accord leaves them as they were."""
    assert ours[0] == theirs[0] == {"data": float(n)}
    assert ours[1:] == [{"data": 1.0}] * (n - 1)


def uneven_all_to_all_works(theirs: list, ours: list, n: int) -> None:
    """The page's uneven all_to_all with lists: gloo raises ("invalid tensor size"), accord
    gives the page's stated output."""
    if n != 4:
        return
    assert all(r["call"]["raised"] and r["call"]["raised"][0] == "RuntimeError" for r in theirs)
    stated = [[[0, 1], [10, 11, 12], [20, 21], [30, 31]], [[2, 3], [13, 14], [22], [32, 33]],
              [[4], [15, 16], [23], [34, 35]], [[5], [17, 18], [24], [36]]]
    assert [r["call"]["raised"] for r in ours] == [None] * 4
    assert [r["output"] for r in ours] == stated
    inputs = scripts_rooted_exchanges.DOCS_A2A_INPUTS
    assert sorted(v for out in stated for piece in out for v in piece) == sorted(v for i in inputs for v in i)


def integer_avg_truncates(theirs: list, ours: list, n: int) -> None:
    """ReduceOp.AVG on int64: gloo raises (AVG is NCCL's), accord divides the exact sum by n,
    truncating toward zero. The rest of the script is compared as usual."""
    for t, o in zip(theirs, ours):
        assert t["avg_int64"]["raised"][0] == "RuntimeError" and o["avg_int64"]["raised"] is None
        sums = [sum(2 * r + 1 for r in range(n)), sum(-r - 1 for r in range(n))]
        assert o["avg_result"]["values"] == [int(s / n) for s in sums]
        rest = ("members", "reduce_op_max")
        assert not mismatches({k: t[k] for k in rest}, {k: o[k] for k in rest})


DELIBERATE: dict[str, Callable[[list, list, int], None]] = {
    "docs_seed002_reduce": reduce_leaves_other_ranks_alone,
    "docs_ref_all_to_all_uneven_lists": uneven_all_to_all_works,
    "docs_ref_reduce_op": integer_avg_truncates,
}


def _cases() -> list[Any]:
    on_gloo = set(names_for("torch-gloo"))
    params = []
    for ws, impl in JOBS:
        for name in names_for(impl):
            if name not in on_gloo:
                continue
            marks = ([pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[name])]
                     if name in KNOWN_DIFFERENCES else [])
            params.append(pytest.param(ws, impl, str(name), id=f"ws{ws}-{impl}-{name}", marks=marks))
    return params


@pytest.mark.parametrize(("world_size", "impl", "name"), _cases())
def test_same_as_torch(runs, world_size: int, impl: str, name: str) -> None:
    theirs = results(runs("torch-gloo", world_size), name)
    ours = results(runs(impl, world_size), name)
    assert len(ours) == len(theirs) == world_size
    if name in DELIBERATE:
        DELIBERATE[name](theirs, ours, world_size)
        return
    problems = [f"rank {r}{m}" for r, (t, o) in enumerate(zip(theirs, ours)) for m in mismatches(t, o)]
    assert not problems, f"{impl} differs from torch-gloo on {name} at {world_size} ranks:\n  " + \
        "\n  ".join(problems[:20])


# -- what the documents state (gloo too: it checks the scripts) -----------------------------

@pytest.mark.parametrize("impl", ["torch-gloo", *(impl for ws, impl in JOBS if ws == 4)])
def test_seed002_printed_outputs_at_4_ranks(runs, impl: str) -> None:
    """The blog's outputs: all_reduce 4.0 everywhere; scatter r + 1; gather and all_gather
    [0., 1., 2., 3.]; broadcast 0.; reduce 4.0 on rank 0."""
    job = runs(impl, 4)
    assert [r["data"] for r in results(job, "docs_seed002_all_reduce")] == [4.0] * 4
    assert [r["data"] for r in results(job, "docs_seed002_scatter")] == [1.0, 2.0, 3.0, 4.0]
    gathered = [s["values"] for s in results(job, "docs_seed002_gather")[0]["data"]]
    assert gathered == [[0.0], [1.0], [2.0], [3.0]]
    for res in results(job, "docs_seed002_all_gather"):
        assert [s["values"] for s in res["data"]] == [[0.0], [1.0], [2.0], [3.0]]
    assert all(r["data"]["values"] == [0.0] for r in results(job, "docs_seed002_broadcast"))
    assert results(job, "docs_seed002_reduce")[0] == {"data": 4.0}


@pytest.mark.parametrize(("world_size", "impl"), [(2, "torch-gloo"), (4, "torch-gloo"), *JOBS])
def test_monitored_barrier_examples_name_the_missing_ranks(runs, impl: str, world_size: int) -> None:
    """"Raises exception indicating that rank 1 did not call into monitored_barrier", and
    with wait_all_ranks=True "that ranks 1, 2, ... world_size - 1 did not"."""
    res = results(runs(impl, world_size), "docs_ref_monitored_barrier")
    assert res[0]["without_rank1"]["names"] == [1]
    assert res[0]["wait_all_ranks"]["names"] == list(range(1, world_size))
    assert "RuntimeError" in res[0]["wait_all_ranks"]["raised"]


@pytest.mark.parametrize(("world_size", "impl"), [(2, "torch-gloo"), (4, "torch-gloo"), *JOBS])
def test_object_lists_longer_than_the_group(runs, world_size: int, impl: str) -> None:
    """torch fills the first world_size slots and leaves the rest; accord does the same."""
    n = world_size
    res = results(runs(impl, n), "docs_ref_object_lists_longer_than_the_group")
    for rank, r in enumerate(res):
        assert r["all_gather_object"] == [repr({"rank": i}) for i in range(n)] + ["'untouched'"] * 2
        assert r["gather_object"] == ([repr(10 * i) for i in range(n)] + ["'untouched'"]
                                      if rank == 0 else None)


@pytest.mark.parametrize("world_size", [ws for ws, impl in JOBS if impl == "accord-torch"])
def test_profiler_events_of_accord_only_calls(runs, world_size: int) -> None:
    """Events gloo records differently (reduce_scatter as all_reduce, object collectives as
    several tensor calls) or cannot record (NumPy inputs: stand-ins of the same shape)."""
    n = world_size
    expected = sorted([["accord:all_gather_object", [], []],
                       ["accord:all_reduce", [[2, 3]], ["double"]],
                       ["accord:monitored_barrier", [], []],
                       ["accord:reduce_scatter", [[2]] * n, ["float"] * n]])
    for res in results(runs("accord-torch", n), "docs_ref_profiling_accord_only"):
        assert res["events"] == expected


@pytest.mark.parametrize(("world_size", "impl"), [(2, "torch-gloo"), *JOBS])
def test_multigpu_example_gives_the_stated_value(runs, world_size: int, impl: str) -> None:
    """"all 16 tensors on the two nodes will have the all-reduced value of 16": every one of
    the world size × 2 list elements holds their count."""
    for res in results(runs(impl, world_size), "docs_ref_multigpu_example"):
        assert res["tensors"] == [float(world_size * 2)] * 2
