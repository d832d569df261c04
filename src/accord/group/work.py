"""Work (the handle of an operation) and Future (its result), as torch's.

Owns: completion, results, errors and callbacks of one operation, whether it completed in the
caller's thread, on the group's async worker, or completes when somebody drives the transport
(p2p). Must not know about algorithms or transports: a Work that needs driving gets a
``drive(timeout_seconds)`` callable from the group.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable

from ..errors import ArgumentError, DistTimeoutError
from ..timeouts import format_seconds, to_seconds

Drive = Callable[["float | None"], None]


class Future:
    """The eventual result of an operation (torch.futures.Future's interface)."""

    def __init__(self, drive: Drive | None = None, poll: Callable[[], bool] | None = None) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future], None]] = []
        self._drive = drive  # completes the future when called (p2p: drives the transport)
        self._poll = poll    # completes the future if the operation is already done

    def done(self) -> bool:
        if not self._done.is_set() and self._poll is not None:
            self._poll()
        return self._done.is_set()

    def wait(self) -> Any:
        """Block until complete; return the value or raise the operation's error."""
        if not self._done.is_set() and self._drive is not None:
            self._drive(None)
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def value(self) -> Any:
        """The value of a completed future (raises its error); call wait() first."""
        if not self.done():
            raise RuntimeError("Future.value() called before the future completed; call wait()")
        return self.wait()

    def set_result(self, result: Any) -> None:
        self._finish(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._value, self._error = value, error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run_callback(callback, self)

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        """Run ``callback(self)`` once complete (at once if already complete)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        _run_callback(callback, self)

    def then(self, callback: Callable[[Future], Any]) -> Future:
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


def _run_callback(callback: Callable[[Future], Any], fut: Future) -> None:
    try:
        callback(fut)
    except Exception:  # noqa: BLE001 — a callback's failure must not break the operation
        import logging

        logging.getLogger("accord").exception("a Future callback raised")


class Work:
    """A pending or completed operation (torch.distributed.Work's interface)."""

    def __init__(self, name: str, result: list[Any], future: Future | None = None,
                 source: Callable[[], int] | None = None) -> None:
        self.name = name
        self._result = result
        self._future = future or Future()
        self._source = source

    @classmethod
    def completed(cls, name: str, result: list[Any], source: int | None = None) -> Work:
        work = cls(name, result, source=(lambda: source) if source is not None else None)
        work._future.set_result(result)
        return work

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        """Block until done, or at most ``timeout``; re-raise the operation's error.

        ``timeout=None`` or zero waits as long as the operation's own deadline allows.
        """
        seconds = to_seconds(timeout, default=0)
        if seconds and not self._future.done():
            give_up = time.monotonic() + seconds
            if self._future._drive is not None:
                self._future._drive(seconds)  # may finish it here (p2p, a queued async call)
            if not self._future._done.wait(max(0.0, give_up - time.monotonic())):
                raise DistTimeoutError(f"{self.name}: Work.wait timed out after {format_seconds(seconds)}")
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self._future.done() and self._future._error is None

    def exception(self) -> BaseException | None:
        return self._future._error if self._future.done() else None

    def get_future(self) -> Future:
        return self._future

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
