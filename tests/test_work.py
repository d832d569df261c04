"""Work and Future: async collectives in order on the worker thread, results, errors, callbacks."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import accord as dist
from accord.group.work import Future, Work
from harness import run_ranks


def test_async_all_reduce_returns_work_and_future_with_the_tensor():
    def body(rank):
        data = np.full(4, rank + 1.0)
        work = dist.all_reduce(data, async_op=True)
        assert isinstance(work, dist.Work)
        value = work.get_future().wait()
        assert work.wait() is True and work.is_completed() and work.is_success()
        assert work.exception() is None
        return value[0] is data, data.tolist()

    assert run_ranks(3, body) == [(True, [6.0] * 4)] * 3


def test_async_ops_run_in_submission_order_and_interleave_with_blocking_ones():
    def body(rank):
        works, datas = [], []
        for i in range(10):
            data = np.full(3, float(rank * 100 + i))
            works.append(dist.all_reduce(data, op=dist.ReduceOp.MAX, async_op=True))
            datas.append(data)
        blocking = np.full(2, float(rank))
        dist.all_reduce(blocking)  # runs in this thread while the worker drains the queue
        for work in works:
            work.wait()
        return [d[0] for d in datas], blocking[0]

    results = run_ranks(3, body)
    for values, blocking in results:
        assert values == [200.0 + i for i in range(10)] and blocking == 3.0


def test_async_broadcast_and_barrier():
    def body(rank):
        data = np.arange(3) if rank == 2 else np.zeros(3, dtype=np.int64)
        w1 = dist.broadcast(data, src=2, async_op=True)
        w2 = dist.barrier(async_op=True)
        w1.wait()
        w2.wait()
        return data.tolist()

    assert run_ranks(4, body) == [[0, 1, 2]] * 4


def test_then_chains_and_callbacks_run():
    def body(rank):
        data = np.ones(2)
        work = dist.all_reduce(data, async_op=True)
        seen = []
        work.get_future().add_done_callback(lambda fut: seen.append("done"))
        doubled = work.get_future().then(lambda fut: fut.value()[0] * 2).wait()
        return doubled.tolist(), seen

    assert run_ranks(2, body) == [([4.0, 4.0], ["done"])] * 2


def test_future_basics_without_a_group():
    fut = Future()
    assert not fut.done()
    with pytest.raises(RuntimeError):
        fut.value()
    chained = fut.then(lambda f: f.value() + 1)
    fut.set_result(41)
    assert fut.done() and fut.value() == 41 and chained.wait() == 42

    failing = Future()
    failing.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        failing.wait()
    recovered = failing.then(lambda f: "handled")
    assert recovered.wait() == "handled"


def test_completed_work_and_source_rank_only_for_receives():
    work = Work.completed("all_reduce #1 on rank 0", ["t"])
    assert work.is_completed() and work.result() == ["t"]
    with pytest.raises(ValueError, match="receives"):
        work.source_rank()


def test_a_failed_async_op_reports_through_work_and_future():
    def body(rank):
        if rank == 1:
            return None  # never joins the all_reduce: rank 0's async op times out
        group = dist.new_group([0, 1], timeout=0.3)
        work = dist.all_reduce(np.ones(1), group=group, async_op=True)
        with pytest.raises(dist.DistTimeoutError, match=r"all_reduce #1 .*nothing from rank 1"):
            work.wait()
        assert isinstance(work.exception(), dist.DistTimeoutError)
        assert not work.is_success()
        return True

    def both(rank):
        if rank == 1:
            dist.new_group([0, 1], timeout=0.3)
            event.wait(5)
            return None
        try:
            return body(rank)
        finally:
            event.set()

    event = threading.Event()
    assert run_ranks(2, both, expect_failure=True)[0] is True
