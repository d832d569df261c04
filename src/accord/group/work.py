"""Work (the handle of an operation) and Future (its result), as torch's.

Owns: completion, results, errors and callbacks of one operation, whether it completed in the
caller's thread, on the group's async worker, or completes when somebody drives the transport
(p2p). Must not know about algorithms or transports: a Work that needs driving gets a
``drive(timeout_seconds)`` callable from the group.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError, DistTimeoutError, PeerError
from ..profiling import HANDED_BACK as _HANDED_BACK
from ..profiling import flush as _flush_events
from ..timeouts import format_seconds, to_seconds

Drive = Callable[["float | None"], None]


class FutureMethods:
    """What a Future does, for any class with ``FUTURE_SLOTS``: ``Future`` itself, and the
    torch backend's Work of a queued call, which is its own Future (one object per async
    call; a torch ``Work`` cannot also be a ``Future`` subclass, whose slots it cannot take,
    so it takes these methods and declares the slots itself).

    ``settled`` (read it, never write it) says whether it completed. A thread that blocks
    for it from another thread gets an Event made then: a future completed by the thread
    that waits for it (a queued call run by its waiter) never makes one.
    """

    if not TYPE_CHECKING:  # (for mypy, the slots are its subclasses' own)
        __slots__ = ()
    settled: bool
    _lock: threading.Lock
    _event: threading.Event | None
    _value: Any
    _error: BaseException | None
    _callbacks: list[Callable[[Any], None]] | None
    _drive: Drive | None
    _poll: Callable[[], object] | None

    def _init_future(
        self, drive: Drive | None, poll: Callable[[], object] | None, lock: threading.Lock
    ) -> None:
        self.settled = False
        #: guards completion against callbacks and blockers; held only for a few stores, so
        #: many futures may share one (the async queue's do: one lock less per call)
        self._lock = lock
        self._event = None
        self._value = None
        self._error = None
        self._callbacks = None
        self._drive = drive  # completes the future when called (p2p: drives the transport)
        self._poll = poll  # completes the future if the operation is already done

    def done(self) -> bool:
        if not self.settled and self._poll is not None:
            self._poll()
        return self.settled

    def wait(self) -> Any:
        """Block until complete; return the value or raise the operation's error."""
        if not self.settled:
            self.drive(None)
            self.block()
        if self._error is not None:
            raise self._error
        return self._value

    def drive(self, timeout: float | None) -> None:
        """Help the operation along for at most ``timeout`` (None: until it is done), if
        this future knows how (p2p: drive the transport); it need not be done after."""
        if self._drive is not None:
            self._drive(timeout)

    def block(self, timeout: float | None = None) -> bool:
        """Wait, at most ``timeout`` seconds, for another thread to complete this future
        (drives nothing); whether it is complete."""
        if self.settled:
            return True
        with self._lock:
            if self.settled:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)

    @property
    def error(self) -> BaseException | None:
        """The operation's error once complete (None: none, or not complete yet)."""
        return self._error

    def value(self) -> Any:
        """The value of a completed future (raises its error); call wait() first."""
        if not self.done():
            raise RuntimeError("Future.value() called before the future completed; call wait()")
        if self._error is not None:
            raise self._error
        return self._value  # (not ``wait()``'s: a torch Work's wait returns True)

    def set_result(self, result: Any) -> None:
        self._finish(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, value: Any, error: BaseException | None) -> None:
        callbacks = self.settle(value, error)
        if callbacks:
            self.run_callbacks(callbacks)

    def settle(self, value: Any, error: BaseException | None) -> list[Callable[[Any], None]] | None:
        """Complete this future (once; later calls do nothing) and wake its waiters, without
        running its callbacks: returns them for ``run_callbacks``. For a caller that must
        first let go of a lock a callback may need (the async queue's: a callback may make
        another call on the same group, as DDP's PowerSGD hook does)."""
        with self._lock:
            if self.settled:
                return None
            self._value, self._error = value, error
            self.settled = True
            event, callbacks, self._callbacks = self._event, self._callbacks, None
        if event is not None:
            event.set()
        return callbacks

    def run_callbacks(self, callbacks: list[Callable[[Any], None]]) -> None:
        for callback in callbacks:
            _run_callback(callback, self)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """Run ``callback(self)`` once complete (at once if already complete)."""
        with self._lock:
            if not self.settled:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        _run_callback(callback, self)

    def then(self, callback: Callable[[Any], Any]) -> Future:
        """A new Future completed with ``callback(self)``'s result (or its exception)."""

        def drive(timeout: float | None) -> None:
            try:
                self.wait()  # completes self, which runs the callback below
            except BaseException:  # noqa: BLE001 — the callback decides what an error means
                pass

        chained = Future(drive=drive)

        def run(fut: Future) -> None:
            try:
                chained.set_result(callback(fut))
            except BaseException as exc:  # noqa: BLE001 — handed to the chained future
                chained.set_exception(exc)

        self.add_done_callback(run)
        return chained


#: The slots a ``FutureMethods`` class declares.
FUTURE_SLOTS = ("settled", "_lock", "_event", "_value", "_error", "_callbacks", "_drive", "_poll")


class Future(FutureMethods):
    """The eventual result of an operation (torch.futures.Future's interface)."""

    __slots__ = FUTURE_SLOTS

    def __init__(
        self,
        drive: Drive | None = None,
        poll: Callable[[], object] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self._init_future(drive, poll, lock if lock is not None else threading.Lock())


def wait_at_most(future: FutureMethods, timeout: timedelta | float, name: str) -> None:
    """The bounded part of a Work's ``wait(timeout)``: wait at most ``timeout`` (zero: no
    bound, nothing to do here) for ``future``, driving it (p2p) or hurrying it (a queued
    call); DistTimeoutError naming ``name`` if it did not complete in time."""
    seconds = to_seconds(timeout, default=0)  # (checks it)
    if seconds and not future.done():
        give_up = time.monotonic() + seconds
        future.drive(seconds)  # may finish it here (p2p), or hurry a queued call
        if not future.block(max(0.0, give_up - time.monotonic())):
            raise DistTimeoutError(f"{name}: Work.wait timed out after {format_seconds(seconds)}")


def _quietly(work: Work) -> None:
    """Wait for ``work``; its error is the joined Work's to report."""
    try:
        work.wait()
    except BaseException:  # noqa: BLE001 — reported through the joined future
        pass


def _run_callback(callback: Callable[[Any], Any], fut: FutureMethods) -> None:
    try:
        callback(fut)
    except Exception:
        import logging

        logging.getLogger("accord").exception("a Future callback raised")


class WorkResult(enum.IntEnum):
    """What ``Work.get_future_result`` completes with (torch's ``WorkResult``, its values)."""

    SUCCESS = 0
    TIMEOUT = 1
    COMM_ERROR = 2
    UNKNOWN = 100


class Work:
    """A pending or completed operation (torch.distributed.Work's interface)."""

    __slots__ = ("name", "_result", "_future", "_source", "_on_future")

    def __init__(
        self,
        name: str,
        result: list[Any],
        future: Future | None = None,
        source: Callable[[], int] | None = None,
        on_future: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._result = result
        self._future = future or Future()
        self._source = source
        self._on_future = on_future  # told when somebody asks for the Future (get_future)

    @classmethod
    def completed(cls, name: str, result: list[Any], source: int | None = None) -> Work:
        work = cls(name, result, source=(lambda: source) if source is not None else None)
        work._future.set_result(result)
        return work

    @classmethod
    def joined(cls, name: str, result: list[Any], works: list[Work]) -> Work:
        """One Work for several (the coalesced calls): complete when all are, with the
        first one's error that failed; waiting for it waits for each in turn."""
        if not works:
            return cls.completed(name, result)
        remaining = [len(works)]
        lock = threading.Lock()

        def drive(timeout: float | None) -> None:
            for work in works:
                if timeout is None:
                    _quietly(work)
                else:
                    work._future.drive(timeout)

        joined = Future(drive=drive)

        def one_done(_: Future) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            error = next((w._future.error for w in works if w._future.error is not None), None)
            if error is None:
                joined.set_result(result)
            else:
                joined.set_exception(error)

        for work in works:
            work._future.add_done_callback(one_done)
        return cls(name, result, joined)

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        """Block until done, or at most ``timeout``; re-raise the operation's error.

        ``timeout=None`` or zero waits as long as the operation's own deadline allows.
        """
        future = self._future
        if timeout is not None:
            wait_at_most(future, timeout, self.name)
        try:
            future.wait()
        finally:
            if _HANDED_BACK:  # an isend's event that the watcher saw end closes here (profiling.end)
                _flush_events()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self._future.done() and self._future._error is None

    def exception(self) -> BaseException | None:
        return self._future._error if self._future.done() else None

    def get_future(self) -> Future:
        """The call's Future. Asking for it says the caller will not run the call by waiting
        (DDP's hooks): a queued async call then starts in the background at once."""
        if self._on_future is not None and not self._future.settled:
            self._on_future()
        return self._future

    def get_future_result(self) -> Future:
        """A Future completed with the call's ``WorkResult`` (an int), never with an error:
        SUCCESS, TIMEOUT (a DistTimeoutError), COMM_ERROR (a peer lost or the group
        broken) or UNKNOWN (any other error). torch implements it for NCCL only."""
        future = self.get_future()

        def classify(done: Future) -> WorkResult:
            error = done.error
            if error is None:
                return WorkResult.SUCCESS
            if isinstance(error, DistTimeoutError):
                return WorkResult.TIMEOUT
            return WorkResult.COMM_ERROR if isinstance(error, PeerError) else WorkResult.UNKNOWN

        return future.then(classify)

    def result(self) -> list[Any]:
        self.wait()
        return self._result

    def source_rank(self) -> int:
        """The group rank that sent the data of a completed any-source receive."""
        if self._source is None:
            raise ArgumentError(f"{self.name}: source_rank() is only defined for receives")
        self.wait()
        return self._source()

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        """CPU work has no streams: nothing to block."""

    def __repr__(self) -> str:
        state = "completed" if self._future.done() else "pending"
        return f"<Work {self.name} {state}>"
