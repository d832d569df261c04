"""Failure behaviour over the loopback transport: dead peers, broken groups, mismatches,
timeouts that name the culprit, abort. (Real-process versions: tests/multiprocess/.)"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import accord as dist
from accord.transport.loopback import LoopbackFabric
from harness import run_ranks


def test_a_dead_peer_breaks_the_group_quickly_and_for_good():
    fabric = LoopbackFabric(3)
    started = threading.Barrier(3)

    def body(rank):
        x = np.ones(2)
        dist.all_reduce(x)
        started.wait()
        if rank == 2:
            fabric.kill(2)
            return "killed"
        t0 = time.monotonic()
        with pytest.raises(dist.PeerError, match="rank 2") as first:
            for _ in range(1000):
                dist.all_reduce(x)
        took = time.monotonic() - t0
        t1 = time.monotonic()
        with pytest.raises(dist.PeerError, match="cannot be used since .*rank 2"):
            dist.all_reduce(x)
        return took, time.monotonic() - t1, isinstance(first.value, ConnectionError)

    results = run_ranks(3, body, fabric=fabric, timeout=30, expect_failure=True)
    for took, again, is_connection_error in results[:2]:
        assert took < 2 and again < 0.5 and is_connection_error


@pytest.mark.parametrize("sizes", [(4, 8), (8, 4)])
def test_collective_size_mismatch_raises_on_every_rank(sizes):
    def body(rank):
        with pytest.raises(dist.CollectiveMismatchError) as info:
            dist.all_reduce(np.ones(sizes[rank], dtype=np.float32))
        return str(info.value)

    for message in run_ranks(2, body, timeout=10, expect_failure=True):
        assert "all_reduce #1" in message and "float32" in message


def test_op_mismatch_names_both_calls_and_reaches_the_root_at_its_next_call():
    def body(rank):
        data = np.ones(4, dtype=np.int64)
        if rank == 0:
            # The root only sends: it notices during its broadcast if rank 1's all_reduce
            # frame arrives in time, else at its next call (told by rank 1: a mismatch error,
            # or the PeerError of the group rank 1's verdict already broke).
            with pytest.raises((dist.CollectiveMismatchError, dist.PeerError)) as info:
                dist.broadcast(data, src=0)
                dist.all_reduce(data)
        else:
            with pytest.raises(dist.CollectiveMismatchError) as info:
                dist.all_reduce(data)
        return str(info.value)

    root, other = run_ranks(2, body, timeout=10, expect_failure=True)
    assert "broadcast #1" in other and "all_reduce #1" in other
    assert "broadcast #1" in root and "rank 1" in root
    assert "rank 1 found that" in root or "all_reduce #1" in root


def test_dtype_and_root_mismatches_are_caught():
    def body(rank):
        with pytest.raises(dist.CollectiveMismatchError, match="int32|float32"):
            dist.all_reduce(np.ones(4, dtype=np.float32 if rank == 0 else np.int32))
        return True

    assert run_ranks(2, body, timeout=10, expect_failure=True) == [True, True]

    def roots(rank):
        # both are "roots", so both only send; the peer's frame is noticed while the broadcast
        # still runs or, at the latest, by the next call, as a frame nobody asked for
        with pytest.raises(dist.CollectiveMismatchError, match="root 1.*root 0|root 0.*root 1"):
            dist.broadcast(np.ones(4), src=rank)
            dist.barrier()
        return True

    assert run_ranks(2, roots, timeout=10, expect_failure=True) == [True, True]


def test_a_failure_spreads_to_ranks_that_did_not_see_it():
    """Ranks 0 and 1 disagree; rank 2 only waits on them: POISON tells it why, fast."""

    def body(rank):
        count = 8 if rank == 1 else 4
        t0 = time.monotonic()
        with pytest.raises(dist.DistBackendError) as info:
            dist.all_reduce(np.ones(count), group=dist.new_group(timeout=20))
        return type(info.value).__name__, time.monotonic() - t0

    results = run_ranks(3, body, timeout=20, expect_failure=True)
    assert all(took < 5 for _, took in results), results


def test_timeout_names_the_collective_its_number_and_the_missing_rank():
    release = threading.Event()

    def body(rank):
        group = dist.new_group(timeout=0.4)
        x = np.ones(1)
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
        assert isinstance(info.value, TimeoutError)
        return str(info.value), time.monotonic() - t0

    message, took = run_ranks(2, body, timeout=10, expect_failure=True)[0]
    assert "all_reduce #2" in message and "rank 1" in message and "same order" in message
    assert 0.35 < took < 3


def test_abort_from_another_thread_unblocks_a_waiting_call():
    def body(rank):
        if rank == 1:
            time.sleep(1.0)
            return None
        group = dist.group.WORLD
        threading.Timer(0.2, group.abort).start()
        t0 = time.monotonic()
        with pytest.raises(dist.PeerError, match="aborted"):
            dist.recv(np.zeros(1), src=1)
        return time.monotonic() - t0

    took = run_ranks(2, body, timeout=10, expect_failure=True)[0]
    assert took < 1.0


def test_calls_after_destroy_say_not_initialized():
    def body(rank):
        dist.destroy_process_group()
        with pytest.raises(dist.NotInitializedError, match="init_process_group"):
            dist.all_reduce(np.ones(1))
        return dist.is_initialized()

    assert run_ranks(2, body) == [False, False]
