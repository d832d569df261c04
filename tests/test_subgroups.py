"""new_subgroups, new_subgroups_by_enumeration, split_group; several groups used at once
(threads, async) without cross-talk; monitored_barrier and the ranks it names."""

from __future__ import annotations

import contextvars
import threading
import time
from datetime import timedelta

import numpy as np
import pytest

import accord as dist
from accord.transport.loopback import LoopbackFabric
from harness import run_ranks


def test_new_subgroups_of_equal_size():
    def body(rank):
        mine, groups = dist.new_subgroups(group_size=2)
        x = np.array([rank])
        dist.all_reduce(x, group=mine)
        return dist.get_process_group_ranks(mine), mine.rank(), int(x[0]), len(groups)

    assert run_ranks(4, body) == [([0, 1], 0, 1, 2), ([0, 1], 1, 1, 2), ([2, 3], 0, 5, 2), ([2, 3], 1, 5, 2)]


def test_new_subgroups_checks():
    def body(rank):
        with pytest.raises(ValueError, match="group_size is required"):
            dist.new_subgroups()
        with pytest.raises(ValueError, match="must be positive"):
            dist.new_subgroups(0)
        with pytest.raises(ValueError, match="divisible"):
            dist.new_subgroups(2)
        with pytest.raises(ValueError, match="must not exceed"):
            dist.new_subgroups(4)
        with pytest.raises(ValueError, match="appeared in both"):
            dist.new_subgroups_by_enumeration([[0, 1], [1, 2]])
        with pytest.raises(ValueError, match="cannot be empty"):
            dist.new_subgroups_by_enumeration([])
        return True

    assert run_ranks(3, body) == [True] * 3


def test_new_subgroups_by_enumeration_with_a_rank_left_out():
    def body(rank):
        mine, groups = dist.new_subgroups_by_enumeration([[0, 2], [1]])
        if mine is None:
            return None, groups[0] is dist.GroupMember.NON_GROUP_MEMBER
        out = [np.zeros(1, dtype=np.int64) for _ in range(mine.size())]
        dist.all_gather(out, np.array([rank]), group=mine)
        return [int(o[0]) for o in out], mine.size()

    assert run_ranks(4, body) == [([0, 2], 2), ([1], 1), ([0, 2], 2), (None, True)]


def test_split_group_uses_parent_group_ranks():
    def body(rank):
        parent = dist.new_group([1, 2, 3])
        if rank == 0:
            return None
        split = dist.split_group(parent, [[0, 2], [1]])  # parent ranks: globals [1, 3] and [2]
        with pytest.raises(ValueError, match="must not overlap"):
            dist.split_group(parent, [[0, 1], [1]])
        with pytest.raises(ValueError, match="out of range"):
            dist.split_group(parent, [[0, 3]])
        with pytest.raises(ValueError, match="None or empty"):
            dist.split_group(parent, [])
        alone = dist.split_group(parent, [[0, 1]])
        return dist.get_process_group_ranks(split), alone is None

    assert run_ranks(4, body)[1:] == [([1, 3], False), ([2], False), ([1, 3], True)]


def test_concurrent_groups_do_not_cross_talk():
    """Two overlapping groups driven from two threads at once, with collectives of the same
    sequence numbers, sizes and dtypes: the group id in every frame keeps them apart."""
    def body(rank):
        world = dist.group.WORLD
        mine, _ = dist.new_subgroups(2)
        out: dict[str, list] = {"world": [], "pair": []}

        def on(group, key, scale):
            for i in range(25):
                got = [np.zeros(3, dtype=np.int64) for _ in range(group.size())]
                dist.all_gather(got, np.full(3, scale * rank + i), group=group)
                red = np.zeros(3, dtype=np.int64)
                dist.reduce_scatter_tensor(red, np.full(3 * group.size(), scale * rank + i), group=group)
                out[key].append(([int(g[0]) for g in got], int(red[0])))

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(on, world, "world", 1)),
                   threading.Thread(target=contextvars.copy_context().run, args=(on, mine, "pair", 100))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    for rank, out in enumerate(run_ranks(4, body)):
        base = 2 * (rank // 2)
        for i, (gathered, reduced) in enumerate(out["world"]):
            assert gathered == [r + i for r in range(4)] and reduced == 6 + 4 * i
        for i, (gathered, reduced) in enumerate(out["pair"]):
            assert gathered == [100 * base + i, 100 * (base + 1) + i]
            assert reduced == 100 * (2 * base + 1) + 2 * i


def test_async_calls_on_two_groups_interleave():
    def body(rank):
        evens = dist.new_group([0, 2])
        works, bufs = [], []
        for i in range(10):
            x = np.full(2, rank + i)
            works.append(dist.all_reduce(x, async_op=True))
            bufs.append(x)
            if rank in (0, 2):
                y = [np.zeros(1, dtype=np.int64) for _ in range(2)]
                works.append(dist.all_gather(y, np.array([rank * i]), group=evens, async_op=True))
                bufs.append(y)
        for w in works:
            w.wait()
        return [b.tolist() if isinstance(b, np.ndarray) else [int(v[0]) for v in b] for b in bufs]

    results = run_ranks(3, body)
    assert results[1] == [[3 + 3 * i] * 2 for i in range(10)]
    assert results[0][1::2] == [[0, 2 * i] for i in range(10)]


# -- monitored_barrier ----------------------------------------------------------------------

def test_monitored_barrier_passes_when_everyone_comes():
    def body(rank):
        time.sleep(0.02 * rank)
        dist.monitored_barrier(timeout=timedelta(seconds=5))
        dist.monitored_barrier(wait_all_ranks=True)
        return True

    assert run_ranks(3, body) == [True] * 3


def _stay_until(done: dict[int, threading.Event], cap: float = 5.0) -> None:
    """A rank that never calls monitored_barrier stays (alive, not calling) until every rank
    that calls it has its outcome (sets its event in ``done``), at most ``cap`` s: instead of
    a fixed sleep long enough to outlast their timeout."""
    deadline = time.monotonic() + cap
    for event in done.values():
        event.wait(max(0.0, deadline - time.monotonic()))


@pytest.mark.parametrize("wait_all", [False, True])
def test_monitored_barrier_names_the_missing_ranks_and_fails_everyone_fast(wait_all):
    done = {rank: threading.Event() for rank in (0, 2)}  # the ranks that call it

    def body(rank):
        if rank in (1, 3):
            _stay_until(done)  # never calls it (the docs' example), then leaves
            return None
        started = time.monotonic()
        try:
            with pytest.raises(dist.DistError) as info:
                dist.monitored_barrier(timeout=timedelta(seconds=0.5), wait_all_ranks=wait_all)
        finally:
            done[rank].set()
        return type(info.value).__name__, str(info.value), time.monotonic() - started

    results = run_ranks(4, body, expect_failure=True, timeout=10)
    kind, message, took = results[0]
    assert kind == "DistTimeoutError" and "failed to pass monitored_barrier" in message
    first = message.splitlines()[0]
    assert ("ranks 1, 3 failed to pass" in first) if wait_all else ("rank 1 failed" in first and "3" not in first)
    kind, message, took = results[2]
    assert kind == "PeerError" and took < 1.2  # told by rank 0, at once
    assert ("ranks 1, 3 failed" if wait_all else "rank 1 failed") in message


@pytest.mark.parametrize("wait_all", [False, True])
def test_monitored_barrier_names_ranks_that_left_with_the_absent_ones(wait_all):
    """Ranks 1 and 3 leave without calling it (they return: their world is destroyed, as at
    exit), rank 2 is alive but does not call it: all three in one message (torch: "Ranks 1,
    2, 3 failed to pass monitoredBarrier"), or the first one without wait_all_ranks."""
    done = {rank: threading.Event() for rank in (0, 4)}  # the ranks that call it

    def body(rank):
        if rank in (1, 3):
            return None
        if rank == 2:
            _stay_until(done)  # alive, but never calls it
            return None
        time.sleep(0.1 if rank == 0 else 0.0)
        try:
            with pytest.raises(dist.DistError) as info:
                dist.monitored_barrier(timeout=timedelta(seconds=0.8), wait_all_ranks=wait_all)
        finally:
            done[rank].set()
        return type(info.value).__name__, str(info.value)

    results = run_ranks(5, body, expect_failure=True, timeout=10)
    kind, message = results[0]
    if wait_all:
        assert kind == "DistTimeoutError", message
        assert "ranks 1, 2, 3 failed to pass monitored_barrier in 800 ms" in message, message
        assert "ranks 1, 3 have left the group" in message and "rank 2 did not call it" in message
    else:
        assert kind == "PeerError" and "rank 1 failed to pass" in message, message
        assert "rank 1 has left the group" in message and "3" not in message.splitlines()[0]
    kind, message = results[4]  # arrived: told by rank 0, with rank 0's whole explanation
    assert kind == "PeerError" and "rank 0 reported a failure" in message, message
    assert ("ranks 1, 2, 3 failed" if wait_all else "rank 1 failed") in message


def test_monitored_barrier_when_every_missing_rank_left_fails_at_once():
    def body(rank):
        if rank != 0:
            return None
        time.sleep(0.2)  # they have left by now
        started = time.monotonic()
        with pytest.raises(dist.PeerError) as info:
            dist.monitored_barrier(timeout=timedelta(seconds=5), wait_all_ranks=True)
        return str(info.value), time.monotonic() - started

    message, took = run_ranks(3, body, expect_failure=True, timeout=10)[0]
    assert "ranks 1, 2 failed to pass monitored_barrier" in message and "have left the group" in message
    assert took < 2.0, took  # not the 5 s timeout


def test_monitored_barrier_without_rank_zero_names_rank_zero():
    done = {rank: threading.Event() for rank in (1, 2)}  # the ranks that call it

    def body(rank):
        if rank == 0:
            _stay_until(done)
            return None
        try:
            with pytest.raises(dist.DistError) as info:  # the first to time out tells the other
                dist.monitored_barrier(timeout=timedelta(seconds=0.3))
        finally:
            done[rank].set()
        return type(info.value).__name__, str(info.value)

    results = run_ranks(3, body, expect_failure=True, timeout=10)
    assert any(kind == "DistTimeoutError" and "nothing from rank 0" in message for kind, message in results[1:])
    assert all("monitored_barrier" in message for _, message in results[1:])


@pytest.mark.parametrize("shared", [False, True], ids=["messages", "shared-memory"])
def test_a_call_on_a_destroyed_group_is_refused_before_anything_is_sent(shared):
    """Every kind of call on a group this rank destroyed raises DestroyedGroupError (an
    ArgumentError: ValueError and RuntimeError) at once; the world group goes on working."""
    def body(rank):
        sub = dist.new_group([0, 1])
        assert sub.engine.shared == shared
        dist.all_reduce(np.ones(2), group=sub)
        dist.destroy_process_group(sub)
        calls = {
            "all_reduce": lambda: dist.all_reduce(np.ones(2), group=sub),
            "broadcast": lambda: dist.broadcast(np.ones(2), src=0, group=sub),
            "barrier": lambda: dist.barrier(group=sub),
            "send": lambda: dist.send(np.ones(2), dst=1 - rank, group=sub),
            "irecv": lambda: dist.irecv(np.ones(2), src=1 - rank, group=sub),
        }
        for name, call in calls.items():
            with pytest.raises(dist.DestroyedGroupError, match="destroyed on this rank"):
                call()
        x = np.ones(2)
        dist.all_reduce(x)
        return float(x[0])

    assert run_ranks(2, body, fabric=LoopbackFabric(2, shared_memory=shared)) == [2.0, 2.0]
