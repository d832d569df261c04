"""Differential tests of the collectives beyond all_reduce/broadcast (scripts_rooted_exchanges.py): every
script gives the same per-rank results on torch.distributed (gloo) and on accord, with NumPy
arrays (latency algorithms) and torch tensors (bandwidth algorithms in tiny segments).

Reuses ``runner.run_job`` unchanged: one job per implementation and world size, shared
with the other differential modules for the session (runner.SharedJobs). Where gloo
rejects a call (uneven all_gather and all_to_all lists, stacked outputs, split_group),
accord is checked against the docs' stated outputs or closed forms; the docs' examples are
checked against their stated outputs on gloo too.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from . import runner, scripts_rooted_exchanges  # noqa: E402 — after the importorskip

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

WORLD_SIZES = (2, 3, 4)
ACCORD = ("accord-numpy", "accord-torch", "accord-mpi")
ALL_IMPLS = ("torch-gloo", *ACCORD)
wanted = runner.wanted
#: accord's latency algorithms over TCP (accord-numpy uses shared memory, accord-torch the
#: bandwidth algorithms): one more job, at the world size where Bruck and the trees kick in
EXTRA_JOBS = ((4, "accord-numpy-tcp"),)


def names_for(impl: str) -> list[str]:
    spec = runner.IMPLEMENTATIONS[impl]
    return scripts_rooted_exchanges.names_for(on_torch_gloo=spec.is_torch_gloo, torch_tensors=spec.torch_tensors)


SHARED_JOBS = runner.SharedJobs(names_for, [
    (ws, impl) for ws in WORLD_SIZES for impl in ALL_IMPLS if wanted(ws, impl)] + list(EXTRA_JOBS))


@pytest.fixture(scope="module")
def runs() -> Callable[[str, int], runner.JobResult]:
    """``runs(impl, world_size)``: that job's results, run at most once per session (the
    jobs are shared with the other differential modules: runner.SharedJobs)."""
    return SHARED_JOBS.cache()


results = runner.script_results


def values_of(states: Any) -> Any:
    return None if states is None else [s["values"] for s in states]


# -- accord == torch.distributed (gloo), script by script --------------------------------------

def _cases() -> list[Any]:
    on_gloo = set(names_for("torch-gloo"))
    jobs = [(ws, impl) for ws in WORLD_SIZES for impl in ACCORD if wanted(ws, impl)] + list(EXTRA_JOBS)
    return [pytest.param(ws, impl, name, id=f"ws{ws}-{impl}-{name}")
            for ws, impl in jobs for name in names_for(impl) if name in on_gloo]


@pytest.mark.parametrize(("world_size", "impl", "name"), _cases())
def test_same_results_as_torch_gloo(runs, world_size: int, impl: str, name: str) -> None:
    expected = results(runs("torch-gloo", world_size), name)
    got = results(runs(impl, world_size), name)
    for rank, (e, g) in enumerate(zip(expected, got)):
        assert g == e, f"{impl} differs from torch-gloo on {name!r} at world size {world_size}, rank {rank}"
    assert len(got) == len(expected) == world_size


# -- the docs' stated outputs (gloo too, which checks the scripts) ---------------------------

def each_job(impls: tuple[str, ...] = ALL_IMPLS, world_sizes: tuple[int, ...] = WORLD_SIZES) -> Any:
    jobs = [(ws, i) for ws in world_sizes for i in impls if wanted(ws, i)]
    jobs += [(ws, i) for ws, i in EXTRA_JOBS if ws in world_sizes and i not in impls]
    return pytest.mark.parametrize(("world_size", "impl"), jobs, ids=[f"ws{ws}-{i}" for ws, i in jobs])


@each_job()
def test_docs_all_gather(runs, world_size: int, impl: str) -> None:
    n = world_size
    for res in results(runs(impl, n), "more_docs_all_gather"):
        assert values_of(res["int64"]) == [[1 + 2 * r, 2 + 2 * r] for r in range(n)]
        assert values_of(res["cfloat"]) == [[[1 + 2 * r] * 2, [2 + 2 * r] * 2] for r in range(n)]
        assert res["returned"] is None
    if n == 2:
        assert values_of(results(runs(impl, 2), "more_docs_all_gather")[1]["int64"]) == [[1, 2], [3, 4]]


@each_job()
def test_docs_all_to_all(runs, world_size: int, impl: str) -> None:
    n = world_size
    for rank, res in enumerate(results(runs(impl, n), "more_docs_all_to_all_even")):
        assert values_of(res["int64"]) == [[rank + n * r] for r in range(n)]
        assert values_of(res["cfloat"]) == [[[1 + rank + n * r] * 2] for r in range(n)]
    if n == 4:
        single = results(runs(impl, 4), "more_docs_all_to_all_single_uneven")
        assert [r["output"]["values"] for r in single] == [
            [0, 1, 10, 11, 12, 20, 21, 30, 31], [2, 3, 13, 14, 22, 32, 33],
            [4, 15, 16, 23, 34, 35], [5, 17, 18, 24, 36]]


@each_job()
def test_docs_object_collectives(runs, world_size: int, impl: str) -> None:
    n = world_size
    docs = [repr(o) for o in scripts_rooted_exchanges.DOCS_OBJECTS]  # "foo", 12, {1: 2}
    for rank, res in enumerate(results(runs(impl, n), "more_docs_object_collectives")):
        assert res["broadcast"] == docs
        assert res["all_gather"] == [docs[r % 3] for r in range(n)]
        assert res["scatter"] == [docs[rank % 3]]
        assert res["gather"] == ([repr({"rank": r, "items": list(range(r))}) for r in range(n)]
                                 if rank == n - 1 else None)
    p2p = results(runs(impl, n), "more_object_p2p")
    assert p2p[-1] == {"got": ["{'a': 1}", "'text'", "[1, 2, 3]"], "sender": 0}


@each_job()
def test_batch_ring_and_reduce_scatter_closed_forms(runs, world_size: int, impl: str) -> None:
    n = world_size
    job = runs(impl, n)
    for rank, res in enumerate(results(job, "more_batch_ring")):
        left = (rank - 1) % n
        assert res == {"recv": {"values": [2.0 * left, 2.0 * left + 1], "dtype": "float32", "shape": [2]},
                       "requests": 2}
    for rank, res in enumerate(results(job, "more_reduce_scatter_uneven_list")):
        column = [scripts_rooted_exchanges.values(r, rank + 1, "int64", rank) for r in range(n)]
        assert res["output"]["values"] == [sum(c) for c in zip(*column)]


# -- accord only: checked against closed forms and the docs ----------------------------------

@each_job(impls=ACCORD)
def test_uneven_lists_and_stacked_outputs(runs, world_size: int, impl: str) -> None:
    n = world_size
    job = runs(impl, n)
    for res in results(job, "more_uneven_all_gather"):
        assert values_of(res["tensor_list"]) == [[10 * r + i for i in range(r + 1)] for r in range(n)]
    for res in results(job, "more_stacked_all_gather_into_tensor"):
        assert res["output"] == {"values": [[r, -r] for r in range(n)], "dtype": "int64", "shape": [n, 2]}


@each_job(impls=ACCORD, world_sizes=(4,))
def test_docs_uneven_all_to_all_list(runs, world_size: int, impl: str) -> None:
    """The docs' example output, which gloo cannot produce from lists."""
    got = [values_of(r["output"]) for r in results(runs(impl, 4), "more_docs_all_to_all_uneven_list")]
    assert got == [[[0, 1], [10, 11, 12], [20, 21], [30, 31]], [[2, 3], [13, 14], [22], [32, 33]],
                   [[4], [15, 16], [23], [34, 35]], [[5], [17, 18], [24], [36]]]


@each_job(impls=ACCORD)
def test_split_group_pairs(runs, world_size: int, impl: str) -> None:
    n = world_size
    for rank, res in enumerate(results(runs(impl, n), "more_split_group_pairs")):
        if rank == n - 1 and n % 2:
            assert res == {"group": None}
        else:
            pair = [rank - rank % 2, rank - rank % 2 + 1]
            assert res["group"] == pair and res["sum"]["values"] == [sum(pair) + 2]
