"""Compiled one-round calls (``group/one_round.py``): a planned small call on a shared-memory
group runs as one closure. These tests check that every collective gets one, that its results
are those of the long path (bit for bit), and that it keeps the long path's guarantees: a
mismatch is an error naming both calls, a missing rank times out naming the call, an async
call still running is waited for, and the flight recorder and comm_stats see every call.
(Ranks are threads over shared slots of 4 KiB, as in test_shm_collectives.py, whose tests
of "short and long paths agree" also run a compiled rank beside ranks on the long path.)"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import accord as dist
from accord.reduce_ops import ReduceOp
from accord.transport.loopback import LoopbackFabric
from accord.world import current_world
from harness import run_ranks


@pytest.fixture(autouse=True)
def small_slots(monkeypatch):
    monkeypatch.setenv("ACCORD_SHM_SLOT_BYTES", "4096")


def shm_run(world_size, body, **kwargs):
    return run_ranks(world_size, body, fabric=LoopbackFabric(world_size, shared_memory=True), **kwargs)


def _every_collective(rank, n, dtype, count):
    """One call of each collective on plain arrays (each its own plan); the results, as bytes."""
    x = (np.arange(count) * 0.1 + rank + 1).astype(dtype)
    got = {}
    y = x.copy()
    dist.all_reduce(y)
    got["all_reduce"] = y.tobytes()
    y = x.copy()
    dist.all_reduce(y, op=ReduceOp.AVG)
    got["all_reduce_avg"] = y.tobytes()
    y = x.copy()
    dist.broadcast(y, src=n - 1)
    got["broadcast"] = y.tobytes()
    y = x.copy()
    dist.reduce(y, dst=1, op=ReduceOp.SUM if y.dtype.kind == "c" else ReduceOp.MAX)
    got["reduce"] = y.tobytes()
    outs = [np.zeros(count, dtype) for _ in range(n)] if rank == 0 else None
    dist.gather(x, outs, dst=0)
    got["gather"] = b"".join(o.tobytes() for o in outs) if outs else b""
    y = np.zeros(count, dtype)
    dist.scatter(y, [x + 10 * j for j in range(n)] if rank == 1 else None, src=1)
    got["scatter"] = y.tobytes()
    outs = [np.zeros(count, dtype) for _ in range(n)]
    dist.all_gather(outs, x)
    got["all_gather"] = b"".join(o.tobytes() for o in outs)
    flat = np.zeros(n * count, dtype)
    dist.all_gather_into_tensor(flat, x)
    got["all_gather_into_tensor"] = flat.tobytes()
    y = np.zeros(count, dtype)
    dist.reduce_scatter(y, [x * (j + 1) for j in range(n)])
    got["reduce_scatter"] = y.tobytes()
    y = np.zeros(count, dtype)
    dist.reduce_scatter_tensor(y, np.concatenate([x * (j + 1) for j in range(n)]))
    got["reduce_scatter_tensor"] = y.tobytes()
    outs = [np.zeros(count, dtype) for _ in range(n)]
    dist.all_to_all(outs, [x + 10 * j for j in range(n)])
    got["all_to_all"] = b"".join(o.tobytes() for o in outs)
    flat = np.zeros(n * count, dtype)
    dist.all_to_all_single(flat, np.concatenate([x + 10 * j for j in range(n)]))
    got["all_to_all_single"] = flat.tobytes()
    dist.barrier()
    return got


def _strided(a):
    """The same values in a non-contiguous view: the long path (as_buffer copies it)."""
    wide = np.zeros(2 * a.size, a.dtype)
    wide[::2] = a.reshape(-1)
    return wide[::2]


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex64])
def test_every_small_collective_is_compiled_and_agrees_with_the_long_path(world_size, dtype):
    """Twice through every collective on plain arrays: every plan has its compiled form, and
    the results are, byte for byte, what the long path gives (the same calls on strided
    views, in a second job)."""
    n, count = world_size, 3

    def compiled(rank):
        first = _every_collective(rank, n, dtype, count)
        second = _every_collective(rank, n, dtype, count)
        plans = current_world().default_group.plans
        missing = sorted(key[0] for key, plan in plans.items() if plan is None or plan[-1] is None)
        return first, second, missing

    def long_path(rank):
        return _every_collective_long(rank, n, dtype, count)

    results = shm_run(n, compiled)
    expected = shm_run(n, long_path)
    for rank in range(n):
        first, second, missing = results[rank]
        assert missing == [], f"rank {rank}: not compiled: {missing}"
        assert first == second
        assert first == expected[rank], rank
    # every rank holds the same bits of an all_reduce (reductions in rank order everywhere)
    assert len({results[r][0]["all_reduce"] for r in range(n)}) == 1


def _every_collective_long(rank, n, dtype, count):
    """``_every_collective`` with every argument a strided view (no plan, no compiled form)."""
    x = _strided((np.arange(count) * 0.1 + rank + 1).astype(dtype))
    got = {}

    def fresh(size=count):
        return _strided(np.zeros(size, dtype))

    y = _strided(x.copy())
    dist.all_reduce(y)
    got["all_reduce"] = y.tobytes()
    y = _strided(x.copy())
    dist.all_reduce(y, op=ReduceOp.AVG)
    got["all_reduce_avg"] = y.tobytes()
    y = _strided(x.copy())
    dist.broadcast(y, src=n - 1)
    got["broadcast"] = y.tobytes()
    y = _strided(x.copy())
    dist.reduce(y, dst=1, op=ReduceOp.SUM if y.dtype.kind == "c" else ReduceOp.MAX)
    got["reduce"] = y.tobytes()
    outs = [fresh() for _ in range(n)] if rank == 0 else None
    dist.gather(x, outs, dst=0)
    got["gather"] = b"".join(o.tobytes() for o in outs) if outs else b""
    y = fresh()
    dist.scatter(y, [_strided(x + 10 * j) for j in range(n)] if rank == 1 else None, src=1)
    got["scatter"] = y.tobytes()
    outs = [fresh() for _ in range(n)]
    dist.all_gather(outs, x)
    got["all_gather"] = b"".join(o.tobytes() for o in outs)
    flat = fresh(n * count)
    dist.all_gather_into_tensor(flat, x)
    got["all_gather_into_tensor"] = flat.tobytes()
    y = fresh()
    dist.reduce_scatter(y, [_strided(x * (j + 1)) for j in range(n)])
    got["reduce_scatter"] = y.tobytes()
    y = fresh()
    dist.reduce_scatter_tensor(y, _strided(np.concatenate([x * (j + 1) for j in range(n)])))
    got["reduce_scatter_tensor"] = y.tobytes()
    outs = [fresh() for _ in range(n)]
    dist.all_to_all(outs, [_strided(x + 10 * j) for j in range(n)])
    got["all_to_all"] = b"".join(o.tobytes() for o in outs)
    flat = fresh(n * count)
    dist.all_to_all_single(flat, _strided(np.concatenate([x + 10 * j for j in range(n)])))
    got["all_to_all_single"] = flat.tobytes()
    dist.barrier()
    return got


def test_a_mismatch_after_the_plan_is_an_error_naming_both_calls():
    """Both ranks compile all_reduce of 4 floats; then rank 1 reduces 5: each rank's compiled
    or planned call meets a round whose fingerprint differs, and raises."""
    def body(rank):
        x = np.ones(4, np.float32)
        for _ in range(3):
            dist.all_reduce(x)
        try:
            if rank == 0:
                dist.all_reduce(np.ones(4, np.float32))
            else:
                dist.broadcast(np.ones(5, np.float32), src=0)
        except dist.CollectiveMismatchError as exc:
            return str(exc)
        except dist.PeerError:
            return "peer"
        return "no error"

    got = shm_run(2, body, expect_failure=True)
    assert any("called broadcast" in g or "called all_reduce" in g for g in got), got
    mismatch = next(g for g in got if "called" in g)
    assert "all_reduce #4" in mismatch and "broadcast #4" in mismatch, mismatch


def test_a_missing_rank_times_out_naming_the_call_and_the_rank():
    release = threading.Event()

    def body(rank):
        group = dist.new_group(timeout=0.5)
        x = np.ones(2)
        for _ in range(3):
            dist.all_reduce(x, group=group)
        if rank == 1:
            release.wait(10)
            return None
        t0 = time.monotonic()
        try:
            with pytest.raises(dist.DistTimeoutError) as info:
                dist.all_reduce(x, group=group)
        finally:
            release.set()
        return str(info.value), time.monotonic() - t0

    message, took = shm_run(2, body, expect_failure=True)[0]
    assert "all_reduce #4" in message and "rank 1" in message, message
    assert 0.4 < took < 3


def test_an_async_call_in_flight_is_waited_for():
    """A blocking call issued while an async one still runs takes the long path (which waits
    for its turn); the results and the call order are right."""
    def body(rank):
        a, b = np.full(3, rank + 1.0), np.full(3, 10.0 * (rank + 1))
        dist.all_reduce(b)  # compile
        b[...] = 10.0 * (rank + 1)
        outs = []
        for _ in range(5):
            work = dist.all_reduce(a, async_op=True)
            dist.all_reduce(b)
            work.wait()
            outs.append((a.tolist(), b.tolist()))
            a[...], b[...] = rank + 1.0, 10.0 * (rank + 1)
        return outs

    for outs in shm_run(3, body):
        assert outs == [([6.0] * 3, [60.0] * 3)] * 5


def test_the_flight_recorder_and_comm_stats_see_compiled_calls():
    def body(rank):
        x = np.ones(8, np.float32)
        for _ in range(10):
            dist.all_reduce(x)
            dist.barrier()
        group = current_world().default_group
        ring = [e for e in group.recorder.ring if e is not None]
        return dist.comm_stats()[group.group_name], [(e.op, e.state) for e in ring][-4:]

    for stats, last in shm_run(2, body):
        assert stats["all_reduce"]["calls"] == 10 and stats["all_reduce"]["bytes"] == 10 * 32
        assert stats["barrier"]["calls"] >= 10
        assert last == [("all_reduce", "completed"), ("barrier", "completed")] * 2


def test_a_root_that_posts_first_records_its_call_with_the_number_it_posted(monkeypatch):
    """broadcast's and scatter's root post before their record is made when their slot is
    free (one_round.post_first): the record still has the number the round carried, in
    order, and the receivers (who check that number's hash) get the data."""
    from accord.group import one_round

    posted = []  # (op, the number posted, whether a record existed yet)
    real = one_round.compile_call

    def spying(group, op, fp, nbytes, make_body):
        def make(rnd):
            body = make_body(rnd)
            if not getattr(body, "posts_only", False):
                return body

            def send(k, h, seq, parity, *args):
                posted.append((op, seq, group.calls.recorder.current is not None))
                body(k, h, seq, parity, *args)

            send.posts_only = True
            return send

        return real(group, op, fp, nbytes, make)

    monkeypatch.setattr(one_round, "compile_call", spying)

    def body(rank):
        group = current_world().default_group
        x = np.full(4, float(rank), np.float32)
        y = np.zeros(2, np.float32)
        got, numbered = [], []

        def check():
            if rank == 0:  # the root's record is the call it posted, by its number
                done = group.recorder.last_done
                numbered.append((posted[-1][:2], (done.op, done.seq)))

        for i in range(6):  # each after a barrier, as OSU times them: the slot is free
            dist.broadcast(x, src=0)
            check()
            dist.barrier()
            dist.scatter(y, [np.full(2, 10.0 * r + i, np.float32) for r in range(2)] if rank == 0 else None, src=0)
            check()
            got.append((x.tolist(), y.tolist()))
            dist.barrier()
        return got, numbered

    (_, numbered), (got1, _) = shm_run(2, body)
    assert got1 == [([0.0] * 4, [10.0 + i] * 2) for i in range(6)]
    assert all(posted_call == recorded for posted_call, recorded in numbered), numbered
    first = [op for op, _, recorded in posted if not recorded]
    # (a slot not free at once would take the usual order: barriers make them free here)
    assert first.count("broadcast") == 6 and first.count("scatter") == 6, posted


def test_plans_are_bounded_for_programs_of_ever_new_shapes():
    from accord.group.plans import MAX_PLANS

    def body(rank):
        group = current_world().default_group
        sizes = []
        for count in range(1, MAX_PLANS + 40):
            x = np.full(count % 300 + 1 if count > 300 else count, 1.0 + rank, np.float32)
            y = np.ones(count, np.int8)
            dist.all_reduce(x)
            dist.all_reduce(y)
            assert (x == 3.0).all() and (y == 2).all()
            sizes.append(len(group.plans))
        return max(sizes)

    assert all(most <= MAX_PLANS for most in shm_run(2, body))


@pytest.mark.parametrize("count", [4, 2000], ids=["compiled", "run_planned"])
def test_a_kept_error_does_not_keep_a_destroyed_groups_memory_mapped(count):
    """A caught CollectiveMismatchError keeps its traceback, whose frames keep their locals
    (views of the slots) and, for a compiled call, its functions: destroying the group must
    still unmap its segments (the compiled calls drop what they bound, a failed call clears
    the locals under it), not leave them to the garbage collector. 2000 float64 take several
    4 KiB slots: run_planned, not compiled."""
    def body(rank):
        group = dist.new_group()
        x = np.ones(count)
        for _ in range(3):
            dist.all_reduce(x, group=group)
        kept = None
        try:
            if rank == 0:
                dist.all_reduce(np.ones(count), group=group)
            else:
                dist.broadcast(np.ones(count + 1), src=0, group=group)
        except (dist.CollectiveMismatchError, dist.PeerError) as exc:
            kept = exc
        segments = list(group.engine._shm._segments)
        dist.destroy_process_group(group)
        return kept is not None, [s.mmap.closed for s in segments]

    import gc
    gc.disable()  # only reference counting may free them, as in a process that never collects
    try:
        results = shm_run(2, body, expect_failure=True)
    finally:
        gc.enable()
    for caught, closed in results:
        assert caught and all(closed), results
