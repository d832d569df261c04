"""Async calls are queued and run by whoever needs them first: the waiter, a later blocking
call on the group, or the worker after its pickup delay (``group/executor.py``).

What must hold whatever runs them: the calls of a group start in the order they were made
(so every rank agrees), a bad argument raises at the call, a call nobody waits for still
finishes in the background, a Future asked for completes without a wait, and a p2p exchange
made after an async collective cannot deadlock on it (the collective is not run inline at
submission).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import accord as dist
from accord.api.common import resolve_group
from accord.group import collective_ops
from accord.group.executor import MAX_BACKED_OFF, AsyncExecutor
from accord.group.work import Future
from harness import run_ranks


def test_waits_in_reverse_order_run_every_call_in_submission_order():
    def body(rank):
        n = dist.get_world_size()
        a = np.full(3, rank + 1.0)
        b = np.arange(4.0) if rank == 1 else np.zeros(4)
        out = np.zeros(2 * n)
        works = [dist.all_reduce(a, async_op=True),
                 dist.broadcast(b, src=1, async_op=True),
                 dist.all_gather_into_tensor(out, np.full(2, float(rank)), async_op=True),
                 dist.barrier(async_op=True)]
        for work in reversed(works):
            work.wait()
        assert all(w.is_completed() and w.is_success() for w in works)
        return a.tolist(), b.tolist(), out.tolist()

    n = 3
    expected = ([6.0] * 3, [0.0, 1.0, 2.0, 3.0], [float(r) for r in range(n) for _ in range(2)])
    assert run_ranks(n, body) == [expected] * n


def test_a_blocking_call_runs_the_queued_ones_first():
    def body(rank):
        queued = [np.full(2, float(rank + i)) for i in range(5)]
        works = [dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True) for x in queued]
        blocking = np.full(1, 1.0)
        dist.all_reduce(blocking)  # queued calls first: no rank may see a call out of order
        assert all(w.is_completed() for w in works)
        return [x[0] for x in queued], blocking[0]

    n = 4
    assert run_ranks(n, body) == [([float(n - 1 + i) for i in range(5)], float(n))] * n


def test_a_call_nobody_waits_for_finishes_in_the_background():
    def body(rank):
        data = np.full(2, rank + 1.0)
        work = dist.all_reduce(data, async_op=True)
        deadline = time.monotonic() + 5
        while not work.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)  # never waits: the worker must pick it up
        return work.is_completed(), data.tolist()

    assert run_ranks(2, body) == [(True, [3.0, 3.0])] * 2


def test_a_future_asked_for_completes_without_a_wait():
    def body(rank):
        data = np.ones(2)
        work = dist.all_reduce(data, async_op=True)
        done = threading.Event()
        work.get_future().add_done_callback(lambda fut: done.set())
        return done.wait(5), data.tolist()

    assert run_ranks(3, body) == [(True, [3.0, 3.0])] * 3


def test_bad_arguments_of_an_async_call_raise_at_the_call():
    def body(rank):
        with pytest.raises(TypeError):
            dist.all_reduce([1, 2, 3], async_op=True)
        with pytest.raises(ValueError):
            dist.broadcast(np.zeros(2), src=7, async_op=True)
        with pytest.raises(ValueError):
            dist.all_gather_into_tensor(np.zeros(3), np.zeros(2), async_op=True)
        x = np.full(2, 1.0)
        dist.all_reduce(x, async_op=True).wait()  # the group is fine afterwards
        return x.tolist()

    assert run_ranks(2, body) == [[2.0, 2.0]] * 2


def test_p2p_after_an_async_collective_does_not_wait_for_it():
    """Rank 0 makes an async all_reduce, then a blocking recv of what rank 1 sends before
    its own all_reduce: run inline at the call, the all_reduce would deadlock (as it does
    not on gloo, whose async calls run on a thread)."""
    def body(rank):
        data = np.full(4, rank + 1.0)
        message = np.zeros(1 << 16)
        if rank == 0:
            work = dist.all_reduce(data, async_op=True)
            dist.recv(message, src=1)
            work.wait()
        else:
            dist.send(np.full(1 << 16, 7.0), dst=0)
            dist.all_reduce(data)
        return data.tolist(), float(message[0]) if rank == 0 else None

    assert run_ranks(2, body) == [([3.0] * 4, 7.0), ([3.0] * 4, None)]


def test_a_queued_call_waited_with_a_timeout_names_the_wait():
    def body(rank):
        if rank == 1:
            dist.new_group([0, 1], timeout=1)
            gate.wait(10)
            return None
        group = dist.new_group([0, 1], timeout=1)
        work = dist.all_reduce(np.ones(1), group=group, async_op=True)
        try:
            with pytest.raises(dist.DistTimeoutError, match="Work.wait timed out"):
                work.wait(timeout=0.2)
        finally:
            gate.set()
        return True

    gate = threading.Event()
    assert run_ranks(2, body, expect_failure=True)[0] is True


def test_a_failed_queued_call_breaks_the_group_and_later_calls_say_so():
    def body(rank):
        group = dist.new_group([0, 1], timeout=0.3)
        if rank == 1:
            return None
        work = dist.all_reduce(np.ones(1), group=group, async_op=True)
        with pytest.raises((dist.DistTimeoutError, dist.PeerError)):  # rank 1 is gone either way
            work.wait()
        with pytest.raises(dist.DistError, match="cannot be used"):
            dist.all_reduce(np.ones(1), group=group, async_op=True).wait()
        return True

    assert run_ranks(2, body, expect_failure=True)[0] is True


# -- the executor alone ------------------------------------------------------------------------


def _queued(executor: AsyncExecutor, value: object, log: list[object]) -> Future:
    return executor.submit(lambda: log.append(value) or value)


def test_a_waiter_runs_its_call_and_those_before_it_in_its_own_thread():
    executor = AsyncExecutor("test", pickup_delay=10.0)  # the worker never gets there first
    log: list[object] = []
    threads: list[str] = []
    first = _queued(executor, 1, log)
    executor.submit(lambda: threads.append(threading.current_thread().name))
    third = _queued(executor, 3, log)
    assert third.wait() == 3 and first.done()
    assert log == [1, 3] and threads == [threading.current_thread().name]
    assert not executor.pending()
    executor.shutdown()


def test_the_worker_starts_a_call_after_the_pickup_delay_and_hurry_starts_it_at_once():
    executor = AsyncExecutor("test", pickup_delay=0.05)
    log: list[object] = []
    future = _queued(executor, "late", log)
    assert future.block(5) and log == ["late"]
    slow = AsyncExecutor("test-slow", pickup_delay=30.0)
    hurried = _queued(slow, "now", log)
    slow.hurry()
    assert hurried.block(5) and log == ["late", "now"]
    executor.shutdown()
    slow.shutdown()

def test_a_worker_backed_off_by_waiters_still_starts_a_call_nobody_waits_for():
    """A call-then-wait loop (the waiter takes every call first) makes the worker look less
    often; a call nobody waits for then still starts, within MAX_BACKED_OFF of its
    submission (plus scheduling), and a hurry still starts one at once."""
    executor = AsyncExecutor("test", pickup_delay=0.001)
    log: list[object] = []
    give_up = time.monotonic() + 0.3
    while time.monotonic() < give_up:  # the waiter takes each call before the worker looks
        _queued(executor, "waited", log).wait()
    started = time.monotonic()
    left = _queued(executor, "left", log)
    assert left.block(5) and log[-1] == "left"
    assert time.monotonic() - started < MAX_BACKED_OFF + 0.5
    while time.monotonic() < give_up + 0.6:
        _queued(executor, "waited", log).wait()
    hurried = _queued(executor, "hurried", log)
    started = time.monotonic()
    executor.hurry()
    assert hurried.block(5) and log[-1] == "hurried"
    assert time.monotonic() - started < 0.5
    executor.shutdown()



def test_a_waiter_whose_call_another_thread_runs_returns_when_it_is_done():
    """The worker took a batch: a slow call, the waiter's, and a slower one made after it.
    The waiter returns once its own call is done, not when the worker lets go of the batch:
    the later call may wait for what the waiter does next (a call on another group that
    a peer makes first)."""
    executor = AsyncExecutor("test", pickup_delay=0.001)
    release = threading.Event()
    executor.submit(lambda: time.sleep(0.2))
    mine = executor.submit(lambda: "mine")
    later = executor.submit(lambda: release.wait(10))
    time.sleep(0.05)  # the worker has taken all three
    started = time.monotonic()
    assert mine.wait() == "mine"
    assert time.monotonic() - started < 2 and not later.done()
    release.set()
    assert later.block(5)
    executor.shutdown()


def test_shutdown_runs_what_is_queued_and_refuses_more():
    executor = AsyncExecutor("test", pickup_delay=30.0)
    log: list[object] = []
    future = _queued(executor, "queued", log)
    executor.shutdown()
    assert future.block(5) and log == ["queued"]
    with pytest.raises(RuntimeError, match="destroyed"):
        executor.submit(lambda: None)


def test_a_callback_may_make_and_wait_for_another_call_on_the_group():
    """As DDP's PowerSGD hook does in its then() callbacks: callbacks run once the queue's
    run lock is let go, whoever ran the call (the waiter, or the worker via get_future)."""
    def body(rank):
        first = np.full(2, rank + 1.0)
        second = np.full(2, 10.0 * (rank + 1))
        group = resolve_group(None, "all_reduce")  # (the callback may run on the worker,
        # a thread without this test rank's world: the group itself, as a process has it)

        def more(fut):
            collective_ops.all_reduce(group, second, dist.ReduceOp.SUM, True).wait()
            return fut.value()[0].tolist() + second.tolist()

        chained = dist.all_reduce(first, async_op=True).get_future().then(more)
        return chained.wait()

    assert run_ranks(2, body) == [[3.0, 3.0, 30.0, 30.0]] * 2
