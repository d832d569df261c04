"""How a call runs on accord's engine: now, queued, or from a cached plan.

Owns: ``MeshCalls``, the half of ``mesh_engine.MeshEngine`` (a mixin: the engine provides
the group, its call state ``calls``, its ``channel``, ``mesh`` and ``call_slots``, and what
breaking means, ``_destroyed`` / ``_raise_broken``) that runs calls — in the caller's thread
(``run_collective`` with ``async_op=False``: after the calls before it, with its Peers, or
its Slots for a shared-memory algorithm), queued as the blocking call it would be and run by
whoever needs it first (``defer``, ``group.executor``), or from a plan the short paths made
(``run_planned``: no Work, no Peers, the deadline made only if needed) — and the profiler
events around them. Split from ``mesh_engine`` (which owns making, breaking and shutting
down the engine, the algorithm choice and the hierarchy) so each stays under 400 lines.
Must not know about environment variables, rendezvous, the API or MPI.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import profiling
from ..arrays import Buffer
from ..collectives import registry
from ..collectives.registry import Algorithm
from ..errors import DestroyedGroupError, clear_frames_below
from ..timeouts import Deadline
from ..transport.mesh import Channel, Mesh
from ..transport.wire import Fingerprint
from .call import CallPeers
from .call_events import EventedRun
from .calls import CallSequencer
from .process_group import ProcessGroup
from .recorder import CallRecord
from .shared_memory import CallSlots
from .work import Work

_modules_get = sys.modules.get  # the profiler check: is torch's profiler module even loaded?
_get_ident = threading.get_ident
_TORCH_PROFILER = profiling.TORCH_PROFILER


class MeshCalls:
    """Running a group's calls on the mesh (see the module docstring)."""

    # What the engine provides (set in MeshEngine.__init__; ``group`` is its property).
    mesh: Mesh
    calls: CallSequencer
    channel: Channel
    call_slots: CallSlots | None
    _queued_names: dict[str, str]
    event_thread: int

    if TYPE_CHECKING:

        @property
        def group(self) -> ProcessGroup: ...

        def context(self, op: str, seq: int | None = None) -> str: ...

        def _destroyed(self, op: str) -> DestroyedGroupError: ...

        def _raise_broken(self, context: str) -> None: ...

    def run_collective(
        self,
        op: str,
        fp: Fingerprint,
        body: Callable[[Any], None],
        outputs: Sequence[Buffer],
        result: list[Any],
        async_op: bool,
        timeout: float | None = None,
        shared: bool = False,
        inputs: Sequence[Any] = (),
    ) -> Work | None:
        """Run ``body`` as the next call of this group: now, or queued (``defer``).

        ``body`` gets the call's Peers, or its Slots when ``shared`` (a shared-memory
        algorithm). Calls run one at a time, in the order they were made; a call takes its
        number when it starts. The call's deadline starts when it is made: ``timeout``
        seconds, else the group's. ``inputs`` (the user's tensors) give the shapes of the
        call's event when torch's profiler records.
        """
        deadline = Deadline.after(self.calls.timeout if timeout is None else timeout)
        if async_op:  # (its event opens when it runs: ``defer``)

            def execute() -> list[Any]:
                return self._execute(op, self.calls.number(), fp, deadline, body, outputs, result, shared)

            work: Work = self.defer(op, execute, result, inputs)
            return work
        queue = self.calls.queue
        if queue.pending():
            queue.drain(deadline.remaining(), self.context(op))
        event = self._begin_event(op, inputs)
        try:
            self._execute(op, self.calls.number(), fp, deadline, body, outputs, result, shared)
        finally:
            if event is not None:
                profiling.end(event)
        return None

    def defer(
        self,
        op: str,
        run: Callable[[], Any],
        result: list[Any],
        inputs: Sequence[Any] = (),
        make: Callable[..., Any] | None = None,
    ) -> Any:
        """Queue ``run`` (a call, run as a blocking one: it takes its number when it starts)
        and return its Work. Whoever needs it first runs it (executor): the caller that
        waits for it, a later blocking call, or the worker after its pickup delay.

        While torch's profiler records, the call's event spans its run, recorded by the
        thread that runs it (``call_events``; ``inputs``: its shapes).

        ``make``: the class of a Work that is its own queue item (``QueuedMethods``: the
        torch backend's), made as ``make(queue, run, name, result)`` and returned instead of
        an accord Work over a ``Queued``: one object per call, not three."""
        queue = self.calls.queue
        prof = _modules_get(_TORCH_PROFILER)  # (_begin_event, written out as run_planned's)
        if (
            prof is not None
            and getattr(prof, "_is_profiler_enabled", False)
            and self.event_thread != _get_ident()
        ):
            run = EventedRun(self, run, op, inputs)
        name = self._queued_names.get(op)
        if name is None:
            name = self._queued_names[op] = f"{self.context(op)} (async)"
        if make is None:
            queued = queue.submit(run)
            return Work(name, result, queued, on_future=queued.hurry)
        work = make(queue, run, name, result)
        queue.enqueue(work)
        return work

    def _begin_event(self, op: str, inputs: Sequence[Any]) -> Any:
        """The profiler's event of a call (None: not recording, or this thread runs it inside
        a queued call's event already)."""
        return None if self.event_thread == _get_ident() else profiling.begin_if_recording(op, inputs)

    def _execute(
        self,
        op: str,
        seq: int,
        fp: Fingerprint,
        deadline: Deadline,
        body: Callable[[Any], None],
        outputs: Sequence[Buffer],
        result: list[Any],
        shared: bool,
    ) -> list[Any]:
        """Run call #seq now, in this thread, after the calls before it (run_collective)."""
        calls = self.calls
        peers = CallPeers(self.group, self.channel, op, seq, fp, deadline)
        if self.mesh.channel_closed(self.channel):
            raise self._destroyed(op)
        if calls.broken is not None or self.channel.error is not None:
            self._raise_broken(str(peers))
        calls.await_turn(seq, deadline, peers)
        channel = self.channel
        record = calls.start(seq, op, fp)
        try:
            channel.begin(seq, fp, peers)
            body(self._slots(peers, seq, fp, deadline) if shared else peers)
        except BaseException as exc:
            try:
                calls.fail(record, exc)
            finally:
                channel.end(seq)
            clear_frames_below(exc)
            raise
        channel.end(seq)
        calls.end(record)
        for out in outputs:
            out.finish()
        return result

    def _slots(self, peers: CallPeers, seq: int, fp: Fingerprint, deadline: Deadline) -> CallSlots:
        slots = self.call_slots
        if slots is None:
            raise self._destroyed(peers.op)
        return slots.reset(peers.op, seq, fp, deadline.expires_at, deadline.budget)

    def run_planned(
        self, op: str, fp: Fingerprint, algorithm: Algorithm, args: Sequence[Any], inputs: Sequence[Any] = ()
    ) -> None:
        """The short path of a blocking call whose plan (algorithm, fingerprint, kernel) the
        caller already has. A shared-memory algorithm runs with no Work, no Peers, the
        deadline made only if needed; a message algorithm (TCP) as ``run_collective`` runs it,
        less the Work and the closures. ``inputs``: as for run_collective."""
        calls = self.calls
        if algorithm.kind == registry.MESSAGES:
            self._run_planned_messages(op, fp, algorithm, args, inputs)
            return
        if calls.queue.pending():
            calls.queue.drain(calls.timeout, self.context(op))
        seq = calls.number()
        if calls.broken is not None or self.channel.error is not None:
            self._raise_broken(self.context(op, seq))
        if calls.finished < seq - 1:
            calls.await_turn(seq, Deadline.after(calls.timeout), self.context(op, seq))
        slots = self.call_slots
        if slots is None:
            raise self._destroyed(op)
        slots.reset(op, seq, fp, time.monotonic() + calls.timeout, calls.timeout)
        record = calls.start(seq, op, fp)
        prof = _modules_get(_TORCH_PROFILER)  # None unless torch is imported: one dict lookup
        if prof is not None:  # torch is imported: is its profiler recording? (profiling.recording)
            try:
                recording = prof._is_profiler_enabled
            except AttributeError:  # torch is being imported by another thread
                recording = False
            if recording and self.event_thread != _get_ident():
                self._run_profiled(op, algorithm, slots, args, inputs, record)
                return
        try:
            algorithm.run(slots, *args)
        except BaseException as exc:
            calls.fail(record, exc)
            clear_frames_below(exc)
            raise
        calls.end(record)

    def _run_planned_messages(
        self, op: str, fp: Fingerprint, algorithm: Algorithm, args: Sequence[Any], inputs: Sequence[Any]
    ) -> None:
        deadline = Deadline.after(self.calls.timeout)
        queue = self.calls.queue
        if queue.pending():
            queue.drain(self.calls.timeout, self.context(op))
        seq = self.calls.number()
        event = self._begin_event(op, inputs)
        try:
            self._execute(op, seq, fp, deadline, lambda peers: algorithm.run(peers, *args), (), [], False)
        finally:
            if event is not None:
                profiling.end(event)

    def _run_profiled(
        self,
        op: str,
        algorithm: Algorithm,
        slots: CallSlots,
        args: Sequence[Any],
        inputs: Sequence[Any],
        record: CallRecord,
    ) -> None:
        """run_planned's end while torch's profiler records: the call inside its event."""
        event = profiling.begin(op, inputs)
        try:
            algorithm.run(slots, *args)
        except BaseException as exc:
            profiling.end(event)
            self.calls.fail(record, exc)
            clear_frames_below(exc)
            raise
        profiling.end(event)
        self.calls.end(record)
