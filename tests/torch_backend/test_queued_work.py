"""``QueuedTorchWork``, the torch Work of an async call on a short path, which is its own queue
item and accord Future: torch's Work interface over it, in one process, on a queue of its own
(no group: the calls are plain functions). The same Work in real jobs: test_torch_api's
async tests, test_training's async patterns and the differential ``work_methods``."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from accord.errors import DistTimeoutError, PeerError  # noqa: E402
from accord.group.executor import AsyncExecutor  # noqa: E402
from accord.integrations.torch.work import QueuedTorchWork  # noqa: E402


@pytest.fixture()
def queue() -> Any:
    executor = AsyncExecutor("test-queue", pickup_delay=5.0)  # (the worker: only if hurried)
    yield executor
    executor.shutdown(2.0)


def submit(queue: AsyncExecutor, run: Any, outputs: list[Any]) -> QueuedTorchWork:
    work = QueuedTorchWork(queue, run, "all_reduce on test (async)", outputs)
    queue.enqueue(work)
    return work


def test_waiting_runs_the_calls_in_order_here(queue: AsyncExecutor) -> None:
    ran: list[tuple[int, int]] = []
    t = torch.ones(2)
    works = [submit(queue, lambda i=i: ran.append((i, threading.get_ident())), [t]) for i in range(3)]
    assert isinstance(works[0], dist.Work) and not works[0].is_completed()
    assert works[1].wait() is True  # runs the first two, here
    assert [i for i, _ in ran] == [0, 1] and {who for _, who in ran} == {threading.get_ident()}
    assert works[0].is_completed() and works[1].is_success() and not works[2].is_completed()
    assert works[2].result() == [t] and [i for i, _ in ran] == [0, 1, 2]
    assert works[2].exception() is None
    assert "all_reduce" in repr(works[2]) and "completed" in repr(works[2])


def test_an_error_reaches_wait_exception_and_the_torch_future(queue: AsyncExecutor) -> None:
    def fails() -> None:
        raise PeerError("rank 1 left")

    work = submit(queue, fails, [torch.ones(1)])
    with pytest.raises(PeerError, match="rank 1 left"):
        work.wait()
    assert work.is_completed() and not work.is_success()
    assert isinstance(work.exception(), PeerError)
    future = work.get_future()
    assert future.done()
    with pytest.raises(RuntimeError, match="rank 1 left"):  # failed in C++, not a value
        future.wait()


def test_asking_for_the_future_starts_the_call_in_the_background(queue: AsyncExecutor) -> None:
    t = torch.full((2,), 3.0)
    work = submit(queue, lambda: t.mul_(2), [t])
    seen: list[float] = []
    future = work.get_future()
    assert work.get_future() is future  # made once
    chained = future.then(lambda fut: seen.append(fut.value()[0][0].item()))
    chained.wait()  # nobody waits for the Work: the worker runs it
    assert seen == [6.0] and work.is_completed()


def test_a_bounded_wait_times_out_naming_the_call_then_the_call_finishes(queue: AsyncExecutor) -> None:
    release = threading.Event()
    work = submit(queue, lambda: release.wait(10), [torch.ones(1)])
    with pytest.raises(DistTimeoutError, match=r"all_reduce on test \(async\): Work.wait timed out"):
        work.wait(timedelta(milliseconds=100))
    assert not work.is_completed()
    release.set()
    assert work.wait(timedelta(seconds=10)) is True and work.is_success()


def test_a_bounded_wait_returns_when_its_call_is_done_not_after_the_workers_batch() -> None:
    """The worker took a batch (a slow call, this one, a slower one after it): a bounded wait
    returns once this call is done, within its timeout, and so does an unbounded one."""
    queue = AsyncExecutor("test-batch", pickup_delay=0.001)
    release = threading.Event()
    submit(queue, lambda: time.sleep(0.2), [])
    bounded, unbounded = submit(queue, lambda: "a", []), submit(queue, lambda: "b", [])
    later = submit(queue, lambda: release.wait(10), [])
    time.sleep(0.05)  # the worker has taken all four
    started = time.monotonic()
    assert bounded.wait(timedelta(seconds=5)) is True and unbounded.wait() is True
    assert time.monotonic() - started < 2 and not later.is_completed()
    assert bounded.then(lambda done: done.value()).wait() == "a"  # (accord's Future: its value)
    release.set()
    assert later.wait(timedelta(seconds=5)) is True
    queue.shutdown(2.0)


def test_source_rank_is_for_receives_only(queue: AsyncExecutor) -> None:
    work = submit(queue, lambda: None, [])
    with pytest.raises(ValueError, match="only defined for receives"):
        work.source_rank()
    work.synchronize()
    work.block_current_stream()
    assert work.is_completed()


def test_a_destroyed_queue_takes_no_more_calls(queue: AsyncExecutor) -> None:
    queue.shutdown(1.0)
    with pytest.raises(RuntimeError, match="destroyed"):
        submit(queue, lambda: None, [])
