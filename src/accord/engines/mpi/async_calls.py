"""An async call on an MPI group: started later, in order, and waited for by its Work.

Owns: ``AsyncCalls``, the half of ``engine.MpiEngine`` (a mixin: the engine provides the
group, its call state ``calls``, the queue ``unstarted`` with its locks and starter thread,
``destroyed`` and how a call ends, ``_succeed`` / ``_fail``) that gets an async call's MPI
part started — in the calls' order, by whoever needs it first (its Work's wait, the group's
next blocking call: ``_start_until``) or by the group's starter thread ``_START_AFTER``
seconds after it was made (``_start_late``) — and the Work that waits for it (``_work``);
``Started``, one queued call; and the group's completer thread, which drives to their end
the calls whose Future somebody asked for (``get_future``: DDP's reducer, a callback) and
nobody may ever wait for: MPI's requests complete only when tested, and a Future's callbacks
run only once they have (``_complete_later``). An async call's check waits for the other
ranks, so it never runs in the caller. Split from ``engine`` (which owns the communicators,
running a call and the check that every rank called the same) so each stays under 400 lines.
Must not know about the API.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...arrays import Buffer
from ...errors import DistTimeoutError
from ...group.calls import CallSequencer
from ...group.process_group import ProcessGroup
from ...group.recorder import CallRecord
from ...group.work import Future, Work
from ...timeouts import Deadline
from .call import MpiCall


class AsyncCalls:
    """Starting and waiting for a group's async calls (see the module docstring)."""

    # What the engine provides (set in MpiEngine.__init__).
    group: ProcessGroup
    calls: CallSequencer
    unstarted: deque[Started]
    _start_lock: threading.Lock
    _starter: threading.Thread | None
    _starter_lock: threading.Lock
    _completer: threading.Thread | None
    _watched: deque[Callable[[bool], None]]
    _watch_ready: threading.Condition
    destroyed: bool

    if TYPE_CHECKING:

        def _succeed(self, entry: CallRecord, outputs: Sequence[Buffer], event: Any) -> None: ...

        def _fail(self, entry: CallRecord, context: str, exc: BaseException, event: Any) -> None: ...

    def _start_until(self, target: Started | None, deadline: Deadline, context: str) -> None:
        """Start the queued async calls in order, up to ``target`` (all: None), here or by
        whoever is starting them now: every rank starts its MPI calls in its calls' order."""
        if not self._start_lock.acquire(timeout=max(deadline.remaining(), 0.001)):
            raise DistTimeoutError(
                f"{context}: the async calls before it on this group did not "
                f"start in time (their ranks did not all reach them)"
            )
        try:
            queued = self.unstarted
            while queued and (target is None or not target.done):
                started = queued[0]
                try:
                    started.start()
                except BaseException as exc:  # noqa: BLE001 — handed to its Work
                    started.error = exc
                started.done = True
                queued.popleft()
        finally:
            self._start_lock.release()

    def _start_late(self) -> None:
        """The group's starter: an async call nobody waited for starts ``_START_AFTER``
        seconds after it was made (its ranks may need this one's part before they wait)."""
        idle_since = time.monotonic()
        while not self.destroyed:
            time.sleep(_START_AFTER)
            try:
                queued = self.unstarted
                if queued and time.monotonic() - queued[0].made >= _START_AFTER:
                    self._start_until(queued[-1], Deadline.after(self.calls.timeout), "an async call")
            except (DistTimeoutError, IndexError):
                pass  # (a caller is starting them; or the queue emptied meanwhile)
            if self.unstarted:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > _STARTER_IDLE:
                with self._starter_lock:  # no async call for a while: stop (the next one starts one)
                    if not self.unstarted:
                        self._starter = None
                        return

    def _complete_later(self, settle: Callable[[bool], None]) -> None:
        """Have the group's completer drive a call to its end (``settle(True)``): somebody
        asked for its Future, whose callbacks must run without a ``wait``."""
        with self._watch_ready:
            self._watched.append(settle)
            if self._completer is None:
                self._completer = threading.Thread(
                    target=self._complete, daemon=True, name=f"accord-mpi-{self.group.group_name}-complete"
                )
                self._completer.start()
            else:
                self._watch_ready.notify()

    def _complete(self) -> None:
        """The group's completer: settles the watched calls in order (each bounded by its
        own deadline; its error goes to its Future); ends after ``_STARTER_IDLE`` seconds
        with nothing to watch, or when the group is shut down."""
        watched = self._watched
        while True:
            with self._watch_ready:
                if not watched and not self.destroyed:
                    self._watch_ready.wait(_STARTER_IDLE)
                if not watched or self.destroyed:
                    self._completer = None
                    return
                settle = watched.popleft()
            try:
                settle(True)
            except BaseException:  # noqa: BLE001 — settle hands every error to its Future
                pass

    def _work(
        self,
        call: MpiCall,
        started: Started,
        entry: CallRecord,
        context: str,
        outputs: Sequence[Buffer],
        result: list[Any],
        event: Any,
    ) -> Work:
        settled = threading.Lock()

        def settle(wait: bool) -> None:
            with settled:
                if future.settled:
                    return
                if not started.done:
                    if not wait:
                        return  # its check is still waiting for the other ranks
                    try:
                        self._start_until(started, call.deadline, context)
                    except BaseException as exc:  # noqa: BLE001 — handed to the Work
                        future.set_exception(exc)
                        return
                if started.error is not None:  # start() recorded the failure
                    future.set_exception(started.error)
                    return
                try:
                    if wait:
                        call.wait_all()
                    elif not call.test():
                        return
                except BaseException as exc:  # noqa: BLE001 — handed to the Work
                    self._fail(entry, context, exc, event)
                    future.set_exception(exc)
                    return
                self._succeed(entry, outputs, event)
                future.set_result(result)

        future = Future(drive=lambda _timeout: settle(True), poll=lambda: settle(False))
        return Work(context, result, future, on_future=lambda: self._complete_later(settle))


#: Seconds after which the group's starter starts an async call nobody has waited for.
_START_AFTER = 0.02
#: Seconds without async calls after which the group's starter thread ends.
_STARTER_IDLE = 1.0


class Started:
    """An async call waiting to start its MPI part (``start``), and whether it did (``done``,
    and how it failed: ``error``)."""

    __slots__ = ("start", "made", "done", "error")

    def __init__(self, start: Callable[[], None]) -> None:
        self.start = start
        self.made = time.monotonic()
        self.done = False
        self.error: BaseException | None = None
