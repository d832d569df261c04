"""Backend "mpi" in real MPI jobs (``mpiexec -n N``, MPICH from the ``mpi`` extra): results
in closed form, async calls, p2p, groups, and what happens when ranks disagree, stall, raise
or die. The differential suite runs every script on it too (implementation "accord-mpi").
Skipped, with the reason, where mpi4py or mpiexec is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import pytest

import accord

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)


def _mpiexec() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return None
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpi = pytest.mark.skipif(MPIEXEC is None, reason="needs mpi4py and mpiexec: pip install 'accord[mpi]'")
pytestmark = [pytest.mark.multiprocess]


def run(scenario: str, n: int, timeout: float = 90, **env: str) -> tuple[dict[int, Any], subprocess.CompletedProcess]:
    """Run one scenario on ``n`` MPI ranks: ({rank: result}, the finished process)."""
    assert MPIEXEC is not None
    with tempfile.TemporaryDirectory() as out:
        environ = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])),
                       OMP_NUM_THREADS="1", ACCORD_TEST_OUT=out, **env)
        done = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi.scenarios", scenario],
                              env=environ, cwd=TESTS, capture_output=True, text=True, timeout=timeout)
        results = {}
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                results[int(name[4:-5])] = json.load(f)
    return results, done


def complete(scenario: str, n: int, **env: str) -> dict[int, Any]:
    results, done = run(scenario, n, **env)
    assert done.returncode == 0 and len(results) == n, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return results


#: Scenarios that tests run on these world sizes without settings of their own, each leaving
#: the group working: one job per world size runs them one after another (their ranks import
#: torch, which takes seconds per job on 2 cores).
SHARED = {2: ("placed_lists", "others_mixed", "future_callbacks", "ddp"),
          3: ("torch_tensors", "placed_lists", "others_mixed", "carried", "future_callbacks", "ddp")}
_shared: dict[int, Any] = {}


def complete_shared(scenario: str, n: int, **env: str) -> dict[int, Any]:
    """``complete(scenario, n, **env)``'s results; without ``env``, from the world size's
    shared job (run once) when the scenario is in it."""
    if env or scenario not in SHARED.get(n, ()):
        return complete(scenario, n, **env)
    if n not in _shared:
        try:
            _shared[n] = complete("+".join(SHARED[n]), n)
        except AssertionError as exc:
            _shared[n] = exc
    if isinstance(_shared[n], AssertionError):
        raise _shared[n]
    return {rank: got[scenario] for rank, got in _shared[n].items()}


@needs_mpi
@pytest.mark.parametrize("n", [1, 3])
def test_ranks_come_from_mpi(n: int) -> None:
    results = complete("basics", n)
    for rank, got in results.items():
        assert got == {"rank": rank, "size": n, "backend": "mpi", "initialized": True, "mpi": True}


@needs_mpi
@pytest.mark.parametrize("n", [3])
def test_every_op_on_every_dtype(n: int) -> None:
    ranks = range(1, n + 1)
    for got in complete("reductions", n).values():
        for i in range(5):
            values = [i + r for r in ranks]
            assert got[f"int32-SUM"][i] == sum(values)
            assert got[f"int64-PRODUCT"][i] == eval("*".join(map(str, values)))
            assert got[f"uint8-MIN"][i] == min(values) and got[f"float64-MAX"][i] == max(values)
            band = values[0]
            for v in values[1:]:
                band &= v
            assert got["int64-BAND"][i] == band
            assert got["int32-AVG"][i] == sum(values) // n  # integer AVG floors, as accord's
            assert got["float16-AVG"][i] == pytest.approx(sum(values) / n, rel=1e-3)
        assert got["float16-SUM"] == [float(sum(i + r for r in ranks)) for i in range(5)]
        trues = [[(i % 2 == r % 2) for r in range(n)] for i in range(5)]
        assert got["bool-MAX"] == [any(t) for t in trues] and got["bool-MIN"] == [all(t) for t in trues]
        assert complex(got["complex64-SUM"][2]) == complex(sum(2 + r for r in ranks))
        assert got["premul_sum"] == [2.0 * sum(ranks)] * 3
        assert got["float16-big"] == [float(sum(ranks))] * 2


@needs_mpi
def test_torch_tensors_bfloat16_and_strided_views() -> None:
    pytest.importorskip("torch")
    for got in complete_shared("torch_tensors", 3).values():
        assert got == {"bf16": [3.0 * i + 3.0 for i in range(4)], "strided": [3.0, 7.0, 11.0],
                       "gather": [[0, 0], [1, 1], [2, 2]]}


@needs_mpi
@pytest.mark.parametrize("n", [2, 5])
def test_list_forms_uneven_sizes_and_every_root(n: int) -> None:
    results = complete("lists", n)
    for rank, got in results.items():
        assert got["all_gather_uneven"] == [[r] * (r + 1) for r in range(n)]
        assert got["all_gather_into_tensor"] == [v for r in range(n) for v in (r, 10 * r)]
        assert got["reduce_scatter_uneven"] == [sum(r + rank for r in range(n))] * (rank + 2)
        assert got["reduce_scatter_tensor_avg"] == [sum(2 * rank + k + r for r in range(n)) / n for k in (0, 1)]
        assert got["all_to_all_uneven"] == [[100 * j + rank] * (j + rank + 1) for j in range(n)]
        offset = sum(range(1, rank + 1))
        assert got["all_to_all_single_uneven"] == [1000 * j + offset + k for j in range(n) for k in range(rank + 1)]
        assert got["all_to_all_single_uneven_arrays"] == got["all_to_all_single_uneven"]
        for root in range(n):
            row = got[f"root{root}"]
            assert row["gather"] == ([[r, r] for r in range(n)] if rank == root else None)
            assert row["scatter"] == [7 * rank] * 3
            product = 1
            for r in range(n):
                product *= r + 1
            assert row["reduce"] == ([product] * 2 if rank == root else [rank + 1] * 2)
            assert row["broadcast"] == [float(root)] * 4


@needs_mpi
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_list_forms_reach_the_arrays_where_they_lie(n: int, long_run: bool) -> None:
    """all_gather, reduce_scatter and all_to_all on lists (layouts.py): every dtype, small
    blocks (through scratch) and large ones (MPI's v-forms at byte offsets), separate arrays,
    views in reversed address order, views with guarded holes, strided views, arrays more
    than 2 GiB apart; in place, uneven with empty blocks, an input inside the outputs, async,
    and ranks mixing the list and tensor forms: each rank's closed-form results."""
    if n == 4 and not long_run:  # 5 s on 2 cores; ranks 1-3 take every path of the layouts
        pytest.skip("world 4 of the list forms: pytest --long")
    pytest.importorskip("torch")
    results = complete_shared("placed_lists", n)
    for rank, got in results.items():
        assert len(got) > 300, sorted(got)
        assert {name: result for name, result in got.items() if result != "ok"} == {}, rank


@needs_mpi
@pytest.mark.parametrize("n, env", [(3, {}), (2, {"ACCORD_TEST_NO_PERSISTENT": "1"}),
                                    (3, {"ACCORD_TEST_GATHER_MAX_WORLD": "2", "ACCORD_TEST_SUMS_SATURATE": "1"}),
                                    (2, {"ACCORD_MPI_CHECKS": "0"})],
                         ids=["gather-3", "before-mpi4", "pair-check", "unchecked"])
def test_small_calls_carried_by_the_check_on_every_path(n: int, env: dict[str, str]) -> None:
    """The check carries small all_reduce/broadcast data (agreement.py): whatever path each
    rank takes, sizes on both sides of the limit give MPI's results; so do the larger
    groups' check (an all_reduce, which carries nothing) and MPI libraries before MPI 4. With
    pair-check, small integers' sums take accord's kernel, as on Open MPI (whose SUM saturates
    int8/int16): they still wrap around."""
    pytest.importorskip("torch")
    import numpy as np
    results = complete_shared("carried", n, **env)
    for rank, got in results.items():
        for dtype in ("int8", "int32", "float64", "complex64"):
            itemsize = np.dtype(dtype).itemsize
            for nbytes in (0, itemsize, 56, 56 + itemsize, 224):
                count = nbytes // itemsize
                want = sum((np.arange(count) + r + 1).astype(dtype) for r in range(n)) if count else []
                assert got[f"all_reduce-{dtype}-{nbytes}"] == [str(v) for v in np.asarray(want, dtype)]
                for root in range(n):
                    assert got[f"broadcast-{dtype}-{nbytes}-{root}"] == [str(v) for v in
                                                                         np.full(count, root * 10 + root, dtype)]
        assert got["MAX"] == [n, 2 * n - 1]
        assert got["AVG"] == [sum(range(1, n + 1)) // n, sum(2 * r + 1 for r in range(n)) // n]
        xor = [0, 0]
        product = [1, 1]
        for r in range(n):
            xor = [xor[0] ^ (r + 1), xor[1] ^ (2 * r + 1)]
            product = [product[0] * (r + 1), product[1] * (2 * r + 1)]
        assert got["BXOR"] == xor and got["PRODUCT"] == product
        assert got["premul_sum"] == [3.0 * sum(range(1, n + 1))] * 2
        if "ACCORD_TEST_SUMS_SATURATE" in env:
            assert got["int8_sum_on_mpi_sum"] is False
        assert got["bf16"] == [float(n * i + sum(range(n))) for i in range(3)]
        assert got["checks"] is (env.get("ACCORD_MPI_CHECKS") != "0")
        if got["checks"]:
            assert got["mismatch"]["type"] == "CollectiveMismatchError"
            assert "rank 0: all_reduce #" in got["mismatch"]["message"]
            assert f"rank {n - 1}: barrier #" in got["mismatch"]["message"]
        assert got["after"] == [n] * 3


@needs_mpi
@pytest.mark.parametrize("n, env", [(2, {}), (3, {}), (2, {"ACCORD_TEST_NO_PERSISTENT": "1"}),
                                    (3, {"ACCORD_TEST_GATHER_MAX_WORLD": "2", "ACCORD_TEST_SUMS_SATURATE": "1"}),
                                    (2, {"ACCORD_MPI_CHECKS": "0"})],
                         ids=["2", "3", "before-mpi4", "pair-check", "unchecked"])
def test_the_other_collectives_agree_on_every_path(n: int, env: dict[str, str]) -> None:
    """reduce, gather, scatter, all_gather_into_tensor, reduce_scatter_tensor,
    all_to_all_single and all_gather's list form have a short path on MPI groups
    (direct_rooted_exchanges.py, direct_lists.py): ranks on it and
    ranks on the long path or async meet in one call and get MPI's results, whether the
    data rides on the check (1 and 3 elements, mostly) or not (20 000), and with the check
    as an all_reduce (larger groups), before MPI 4, or off."""
    pytest.importorskip("torch")
    for rank, got in complete_shared("others_mixed", n, **env).items():
        for count in (1, 3, 20_000):
            for root in range(n):
                key = f"{count}-{root}"
                mine = rank == root
                assert got[f"reduce-{key}"] == [[sum(range(1, n + 1)) if mine else rank + 1] * count]
                assert got[f"reduce_avg-{key}"] == [[sum(range(1, n + 1)) / n if mine else rank + 1.0] * count]
                assert got[f"gather-{key}"] == [[rank] * count, [[r] * count for r in range(n)] if mine else None]
                assert got[f"scatter-{key}"][0] == [10 * rank + root] * count
            assert got[f"all_gather_into_tensor-{count}"][0] == [float(r) for r in range(n) for _ in range(count)]
            assert got[f"all_gather_list-{count}"] == [[[float(r)] * count for r in range(n)], [float(rank)] * count]
            assert got[f"reduce_scatter_tensor-{count}"][0] == [
                sum(rank * count + k + r for r in range(n)) / n for k in range(count)]
            assert got[f"all_to_all_single-{count}"][0] == [
                [1000 * j + rank * count + k for k in range(count)] for j in range(n)]
        assert got["in_place_all_gather"] == [r + 5 for r in range(n) for _ in range(2)]
        outs, mine = got["all_gather_list_uneven"]
        assert outs == [[r + 0.5] * (20_000 + 7 * r) for r in range(n)] and mine == [rank + 0.5] * (20_000 + 7 * rank)
        outs, mine = got["all_gather_list_2d"]
        assert outs == [[[10**6 * r + 200 * i + j for j in range(200)] for i in range(100)] for r in range(n)]
        assert got["scatter_one_array_twice"] == 3 * 20_000
        assert got["gather_into_own_tensor"] == ([(r + 1) * 20_000 for r in range(n)] if rank == 0 else None)
        if env.get("ACCORD_MPI_CHECKS") != "0":
            message = got["mismatch"]["message"]
            assert got["mismatch"]["type"] == "CollectiveMismatchError"
            assert "rank 0: gather #" in message and f"rank {n - 1}: scatter #" in message
        assert got["after"] == ([sum(range(n))] * 2 if rank == 0 else [rank] * 2)


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_an_async_call_returns_before_the_other_ranks_reach_it(n: int) -> None:
    """Before, an async call on backend mpi ran its check in the caller: a send after it that
    the peer needed first deadlocked until the timeout (torch's async calls return at once)."""
    total = sum(range(1, n + 1))
    for rank, got in complete("async_then_messages", n, ACCORD_TEST_TIMEOUT="10").items():
        assert got["sent_first"] == [float(total)] * 3
        assert got["received_after"] == [float(sum(range(n)))] * 2
        if rank == 0:
            assert got["note"] == [9.0]
        mid, sums, last = got["in_order"]
        assert mid == [float(n)] * 2 and last == [float(n - 1)] * 2
        assert sums == [[float(sum(r + i for r in range(n)))] * 2 for i in range(3)]
        assert got["starters"] == []


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_async_calls_in_flight_together(n: int) -> None:
    total = sum(range(n))
    for got in complete("async_many", n).values():
        assert got["sums"] == [total + n * i for i in range(6)]
        assert got["lists"] == [[r] * 3 for r in range(n)]
        assert got["bcast"] == [n - 1] * 5 and got["all_done"] and got["polled_type"]
        assert got["future"] == [float(n)] * 2


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_a_future_asked_for_completes_without_a_wait(n: int) -> None:
    """MPI's requests complete only when tested: the Future of an async call that nobody
    waits for (DDP's reducer waits on it in C++) is driven to its end by the group."""
    for got in complete_shared("future_callbacks", n).values():
        assert got["callback_ran"] and got["completed"]
        assert got["seen"] == [[float(sum(range(1, n + 1)))] * 4]
        assert got["chained"] == 2.0 * sum(range(n))


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_ddp_on_backend_mpi(n: int) -> None:
    """accord's MPI world is torch's default group: DDP trains on it (its buckets' Futures
    complete without a wait) and matches the same steps done by hand."""
    pytest.importorskip("torch")
    for got in complete_shared("ddp", n).values():
        assert got["default_group"] and got["all_reduces"] > 3  # several buckets a step, after the first
        assert got["gap"] < 1e-5


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_point_to_point(n: int) -> None:
    results = complete("point_to_point", n)
    for rank, got in results.items():
        assert got["ring"] == [float((rank - 1) % n)] * 4
    assert results[0]["any_source"] == list(range(1, n)) and results[0]["irecv_source"] == 1
    assert results[1]["object_src"] == 0 and results[1]["objects"] == [{"a": 0}, [0, 1, 2]]


@needs_mpi
@pytest.mark.parametrize("n", [2, 3, 4])
def test_subgroups(n: int) -> None:
    results = complete("groups", n)
    evens = [r for r in range(n) if r % 2 == 0]
    low = [r for r in range(n) if r < (n + 1) // 2]
    for rank, got in results.items():
        if rank % 2 == 0:
            assert got["evens"] == sum(evens) and got["evens_rank"] == evens.index(rank)
        else:
            assert got["evens"] is True
        if n % 2 == 0:
            assert got["pairs"] == (rank // 2) * 4 + 1
        members = low if rank in low else [r for r in range(n) if r not in low]
        assert got["split"] == [len(members), members]
        assert got["shrink"]["type"] == "TypeError" and "ULFM" in got["shrink"]["message"], got


@needs_mpi
def test_mismatch_is_an_error_on_every_rank_and_the_group_goes_on() -> None:
    for rank, got in complete("mismatch", 3).items():
        assert got["error"]["type"] == "CollectiveMismatchError"
        message = got["error"]["message"]
        assert "rank 0: broadcast #1 (float32, 4 elements, root 0)" in message
        assert "rank 2: all_reduce #1 (float32, 4 elements)" in message
        assert got["after"] == [3, 3]
        # an object collective against another: an error on every rank, never another
        # call's objects (before: rank 0's all_gather_object returned rank 2's broadcast)
        message = got["objects"]["message"]
        assert got["objects"]["type"] == "CollectiveMismatchError", got["objects"]
        assert "rank 0: all_gather_object #3 (0 objects)" in message
        assert "rank 1: broadcast_object_list #3 (1 objects, root 2)" in message
        assert got["gathered"] == [0, 1, 2]


@needs_mpi
@pytest.mark.parametrize("op", ["all_reduce", "gather"])
def test_a_stalled_rank_is_named_by_the_others(op: str, long_run: bool) -> None:
    if op == "gather" and not long_run:  # (the same naming as all_reduce's: CI runs that)
        pytest.skip("the rooted variant of the all_reduce case: pytest --long")
    results = complete("stuck", 3, ACCORD_TEST_TIMEOUT="3", ACCORD_PROGRESS_INTERVAL="0.2",
                       ACCORD_TEST_STUCK_OP=op)
    assert results[2] == {"skipped": True}
    for rank in (0, 1):
        error = results[rank]["error"]
        assert error["type"] == "DistTimeoutError"
        assert error["message"].startswith(f"{op} #2 on rank {rank}")
        assert "Did not reach this call: rank 2" in error["message"]
        assert 2.5 < results[rank]["after_s"] < 10 and results[rank]["broken"] is True


@needs_mpi
def test_an_uncaught_exception_ends_the_job_with_a_message() -> None:
    results, done = run("uncaught", 3, timeout=60, ACCORD_TEST_TIMEOUT="60")
    assert done.returncode != 0 and not results
    assert "RuntimeError: rank 1 gives up" in done.stderr
    assert "accord: rank 1 of the MPI job raised RuntimeError" in done.stderr
    assert "MPI_Abort" in done.stderr


@needs_mpi
def test_a_killed_rank_ends_the_job() -> None:
    results, done = run("killed", 3, timeout=60, ACCORD_TEST_TIMEOUT="60")
    assert done.returncode != 0 and not results


@needs_mpi
def test_a_group_with_a_refused_call_keeps_its_communicators() -> None:
    """(On Open MPI, a freed communicator's context is reused and a late message to it was
    delivered to the next group: an abort, or the wrong data.)"""
    results = complete("refused_then_groups", 2)
    assert len(results[0]["raised"]) == 2 and results[0]["raised"][1] == "ShortListError"
    assert results[0]["kept"] == [True, True]
    assert results[1]["raised"] == [] and results[1]["kept"] == [False, False]  # (it only sent)
    for rank, got in results.items():
        assert got["healthy_freed"] is True
        assert got["sums"] == ([[1.0] * 4] if rank == 0 else []) + [[3.0] * 4]


@needs_mpi
def test_user_stores_and_diagnostics_alongside(tmp_path) -> None:
    results = complete("stores_alongside", 2, ACCORD_TEST_FILESTORE=str(tmp_path / "fs"),
                       ACCORD_TEST_DUMPS=str(tmp_path))
    for got in results.values():
        assert got["values"] == ["0", "1"]
        assert ["all_reduce", "completed"] in got["recorded"] and "all_reduce" in got["stats_ops"]
        assert got["recorded"][-3:] == [["broadcast", "completed"]] * 3
        assert got["counted"]["all_reduce"] == [1, 16] and got["counted"]["broadcast"] == [3, 36]
        assert got["last_done"] == got["last_seq"]  # (the short path's end, written out)


def test_without_an_mpi_launcher_a_world_of_several_ranks_says_how_to_start(monkeypatch) -> None:
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpi4py: pip install 'accord[mpi]'")
    code = ("import accord as dist\n"
            "try:\n    dist.init_process_group('mpi', world_size=4)\n"
            "except ValueError as e:\n    print('ERROR', e)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDI_", "MPI_"))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "ERROR" in done.stdout, done.stderr
    assert "not started by an MPI launcher" in done.stdout and "mpiexec -n 4" in done.stdout


def test_without_mpi4py_the_error_says_what_to_install(monkeypatch) -> None:
    from accord import backend_names
    monkeypatch.setattr(backend_names, "is_mpi_available", lambda: False)
    with pytest.raises(ValueError, match=r'pip install "accord\[mpi\]"'):
        backend_names.resolve_backend("mpi")
    assert accord.Backend("MPI") == "mpi"


@needs_mpi
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_cuda_nccl_beside_mpi() -> None:
    """"cpu:mpi,cuda:nccl": the device groups (torch's gloo standing in for NCCL, no GPU here)
    meet in backend mpi's diagnostics store; NumPy arrays stay on MPI."""
    results = complete("with_nccl", 2, ACCORD_TEST_BACKEND="cpu:mpi,cuda:nccl", ACCORD_NCCL_STANDIN="gloo")
    for got in results.values():
        assert got == {"torch": [3.0, 3.0], "numpy": [3.0, 3.0], "config": "cpu:mpi,cuda:nccl",
                       "broadcast": [1.0], "mpi_ops": ["all_reduce"]}
