"""The profiler event of a queued call: opened when the call starts and closed when it ends,
by the thread that runs it.

Owns: ``EventedRun``, a queued call's run wrapped in its ``accord:<op>`` event, made by
``MeshCalls.defer`` while torch's profiler records. The event spans the call's run — as
gloo's events span their run on gloo's worker thread — not the time the call sat in the
queue: an ``async_op=True`` call waited for later (a functional collective under DTensor,
``dist.all_reduce(t, async_op=True)`` then ``wait()``) shows the exchange and the wait for
its peers, not the caller's own work between the call and its wait.

Whose thread records it (``profiling``'s docstring: torch records the threads it knows):

- the caller that waits for it, or its next call on the group, runs it: its event is
  recorded there, exactly;
- somebody asks for its Future (DDP's reducer and comm hooks), so the worker will run it:
  the asking thread opens its event then (``hand_over``, through ``profiling.begin_handed``,
  about 45 µs), and the run ends it exactly, on the worker;
- the worker takes it after its pickup delay, nobody having waited or asked: its event
  records on the worker's thread only when the profiler records every thread
  (``torch._C._profiler._ExperimentalConfig(profile_all_threads=True)``), where every case
  above records on the thread that runs the call too.

Must not know about collectives or transports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .. import profiling

_get_ident = threading.get_ident


class _Engine(Protocol):
    #: the thread running a call inside its event (0: none): the calls it makes open none
    event_thread: int


class EventedRun:
    """``run`` (a queued call) inside its profiler event (the module docstring)."""

    __slots__ = ("_run", "_op", "_inputs", "_engine", "_opener", "_handed", "_started", "_lock")

    def __init__(self, engine: _Engine, run: Callable[[], Any], op: str, inputs: Sequence[Any]) -> None:
        self._run = run
        self._op = op
        self._inputs = inputs
        self._engine = engine
        self._opener = _get_ident()
        self._handed: profiling.Handed | None = None
        self._started = False
        self._lock = threading.Lock()  # hand_over against the start, on another thread

    def __call__(self) -> Any:
        with self._lock:
            self._started = True
            event: profiling.Opened | profiling.Handed | None = self._handed
        engine, me = self._engine, _get_ident()
        if event is None:
            if engine.event_thread == me or not profiling.recording():
                return self._run()
            event = profiling.begin(self._op, self._inputs)
        outer, engine.event_thread = engine.event_thread, me
        try:
            return self._run()
        finally:
            engine.event_thread = outer
            profiling.end(event)

    def hand_over(self) -> None:
        """The caller will not run this call itself (it asked for its Future): open its event
        now, in the caller's thread, if torch would not record the worker's."""
        if _get_ident() != self._opener or not profiling.recording():
            return
        if not profiling.records_known_threads_only():
            return  # every thread records: the worker's own event will
        with self._lock:
            if not self._started and self._handed is None:
                self._handed = profiling.begin_handed(self._op)
