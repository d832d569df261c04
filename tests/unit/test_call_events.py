"""group.call_events: a queued call's profiler event spans its run, on the thread that runs
it; a call handed to another thread has its event opened by the caller and ended by the run.
The whole path under real collectives: tests/torch_backend/programs.py::profiled_async."""

from __future__ import annotations

import threading
import time

import pytest

from accord.group.call_events import EventedRun

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


class _Engine:
    event_thread = 0


def _events(prof) -> list[tuple[str, float]]:  # noqa: ANN001
    return [(e.name, (e.time_range.end - e.time_range.start) / 1e3)
            for e in prof.events() if e.name.startswith("accord:")]


def test_the_event_spans_the_run_not_the_time_before_it() -> None:
    engine = _Engine()
    seen: list[bool] = []
    with torch.profiler.profile() as prof:
        run = EventedRun(engine, lambda: seen.append(engine.event_thread == threading.get_ident()) or "done",
                         "all_reduce", ())
        time.sleep(0.03)  # queued: the caller works on
        assert run() == "done"
    assert seen == [True] and not engine.event_thread  # the calls it makes open none of their own
    ((name, ms),) = _events(prof)
    assert name == "accord:all_reduce" and ms < 20, ms


def test_a_run_inside_an_open_event_opens_none() -> None:
    engine = _Engine()
    engine.event_thread = threading.get_ident()
    with torch.profiler.profile() as prof:
        EventedRun(engine, lambda: None, "all_reduce", ())()
    assert _events(prof) == []


def test_a_call_made_while_another_thread_runs_one_in_its_event_gets_its_own() -> None:
    """DDP: the caller hands bucket k+1 over while the worker runs bucket k inside its
    event; bucket k+1 still gets an event (the flag is the running thread's, not the group's)."""
    engine = _Engine()
    with torch.profiler.profile() as prof:
        engine.event_thread = -1  # (another thread is inside an event)
        second = EventedRun(engine, lambda: None, "all_reduce", ())
        second.hand_over()
        engine.event_thread = 0
        worker = threading.Thread(target=second)
        worker.start()
        worker.join()
    assert [name for name, _ in _events(prof)] == ["accord:all_reduce"]


def test_handed_over_the_worker_thread_ends_the_event_its_caller_opened() -> None:
    engine = _Engine()
    with torch.profiler.profile() as prof:
        run = EventedRun(engine, lambda: time.sleep(0.01), "broadcast", ())
        run.hand_over()
        run.hand_over()  # (asked twice: one event)
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        time.sleep(0.05)  # an event left open would run on to here
    ((name, ms),) = _events(prof)
    assert name == "accord:broadcast" and 10 <= ms < 40, ms


def test_no_hand_over_once_the_run_started_or_from_another_thread() -> None:
    engine = _Engine()
    with torch.profiler.profile() as prof:
        started = EventedRun(engine, lambda: None, "all_reduce", ())
        started()
        started.hand_over()  # ran already: nothing to open
        other = EventedRun(engine, lambda: None, "all_gather", ())
        asker = threading.Thread(target=other.hand_over)  # not the caller's thread: no event
        asker.start()
        asker.join()
    assert [name for name, _ in _events(prof)] == ["accord:all_reduce"]


def test_ddp_buckets_handed_over_while_the_worker_runs_one_each_get_an_event() -> None:
    """Through MeshCalls.defer and a real queue: bucket 2 is made while the worker runs
    bucket 1 inside its event, and still gets its own (a flag shared by the group's threads
    once made defer skip it)."""
    from accord.group.executor import AsyncExecutor
    from accord.group.mesh_calls import MeshCalls

    class _Calls:
        queue = AsyncExecutor("test-call-events")

    class _Deferring(_Engine):
        calls = _Calls()
        _queued_names: dict[str, str] = {}
        defer = MeshCalls.defer

        def context(self, op: str) -> str:
            return op

    engine = _Deferring()
    try:
        engine.defer("warm", lambda: None, []).wait()  # (the worker thread started)
        with torch.profiler.profile() as prof:
            first = engine.defer("all_reduce", lambda: time.sleep(0.02), [])
            first_future = first.get_future()  # the worker runs it now, in its event
            time.sleep(0.005)
            second = engine.defer("broadcast", lambda: time.sleep(0.005), [])
            second_future = second.get_future()
            first_future.wait()
            second_future.wait()
            time.sleep(0.05)
        assert sorted(name for name, _ in _events(prof)) == ["accord:all_reduce", "accord:broadcast"]
        assert all(ms < 40 for _, ms in _events(prof)), _events(prof)
    finally:
        engine.calls.queue.shutdown()
