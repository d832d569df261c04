"""The async queue of a group: ``async_op=True`` calls, run in submission order, each run by
whoever needs it first — the caller that waits for it, a later blocking call, or the worker.

Owns: the queue, the run lock, and the worker thread (started lazily, stopped by
``shutdown``). A queued call is a closure that runs the call as a blocking call would (it
takes its call number when it starts), so the calls of a group start in the order they were
made whoever runs them.

Why queued calls are not handed to the worker at once: "submit, then wait" (torch's
functional collectives, ``dist.all_reduce(t, async_op=True).wait()``) is the commonest async
use, and a thread round trip costs 8–20× a small call's own time. So a waiter runs its call
itself (with the calls queued before it), and so does a blocking call on the group before it
starts. The worker starts only calls that nobody took within ``pickup_delay`` of their
submission (``DEFAULT_PICKUP_DELAY``): DDP's gradient buckets and FSDP's prefetches, whose
caller goes on computing, start that much later, in the background as before.

Each look the worker takes costs the ranks of the host: it needs a core and the GIL, which a
waiter holds, so the hand-over is forced (a call-then-wait loop of functional all_reduces at
world 2 spent 8 % of its iterations at over twice the median, with the worker looking about
700 times a second). So while its looks find nothing it must start (its waiters take every
call first), the worker backs off: each such look doubles the spacing of its looks and the
age at which it takes a call, up to ``MAX_BACKED_OFF`` seconds; the first call it does start
(nobody took it), or a ``hurry``, brings it back to the pickup delay. After ``_LINGER``
seconds of looks without work it sleeps until a submission wakes it (and starts again at
the pickup delay). ``hurry()`` (somebody asked for the call's Future: DDP's hooks) lets the
worker start the queued calls now, from any of its waits.

Blocking calls of accord's own API never come here: they run in the caller's thread (after
the queued calls, ``drain``). Must not know about collectives.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import DistTimeoutError
from .callback_threads import CallbackThreads, call_back
from .work import FUTURE_SLOTS, FutureMethods

#: Seconds a queued call waits for its caller (or a later call) before the worker starts it.
DEFAULT_PICKUP_DELAY = 200e-6
#: The same with more ranks on the host than cores: there a rank is often descheduled
#: between a call and its wait, and a worker that took the call then (a third thread on a
#: busy core, and a hand-back to the waiter) costs more than the overlap it could buy.
OVERSUBSCRIBED_PICKUP_DELAY = 2e-3
#: The longest the worker's looks are apart, and the oldest a call gets before it takes it,
#: while it backs off (its looks found nothing it had to start; see the module docstring).
MAX_BACKED_OFF = 10e-3
#: Seconds of looks without work before the worker sleeps until a submission wakes it.
_LINGER = 0.1

_get_ident = threading.get_ident
_clock = time.monotonic


class QueuedMethods(FutureMethods):
    """What a queued call's Future does (for any class with ``QUEUED_SLOTS``: ``Queued``,
    and the torch backend's Work of a queued call, which is its own queue item): waiting for
    it runs it here (with the calls queued before it); a bounded wait lets the worker run it
    instead (``drive``)."""

    if not TYPE_CHECKING:  # (for mypy, the slots are its subclasses' own)
        __slots__ = ()
    run: Callable[[], Any]
    submitted: float
    _executor: AsyncExecutor

    def _init_queued(self, executor: AsyncExecutor, run: Callable[[], Any]) -> None:
        # (``_init_future(None, None, executor.futures_lock)`` written out: one per async call)
        self.settled, self._lock, self._event, self._value = False, executor.futures_lock, None, None
        self._error = self._callbacks = self._drive = self._poll = None
        self.run = run
        self.submitted = _clock()
        self._executor = executor

    def wait(self) -> Any:
        """``Future.wait`` with the drive written out (it runs on every call-then-wait)."""
        if not self.settled:
            self._executor.run_until(self)
            if not self.settled:
                self.block()
        if self._error is not None:
            raise self._error
        return self._value

    def drive(self, timeout: float | None) -> None:
        if timeout is None:
            self._executor.run_until(self)  # here, with the calls queued before it
        else:
            self.hurry()  # a bounded wait: the worker runs it, the waiter may leave

    def hurry(self) -> None:
        """Its caller will not run it by waiting (it asked for its Future, or waits for at
        most a while): the worker starts it now. A run with ``hand_over`` (its profiler
        event: ``call_events.EventedRun``) is told first, in the caller's thread."""
        if self.settled:
            return
        hand_over = getattr(self.run, "hand_over", None)
        if hand_over is not None:
            hand_over()
        self._executor.hurry()


#: The slots a ``QueuedMethods`` class declares.
QUEUED_SLOTS = (*FUTURE_SLOTS, "run", "submitted", "_executor")


class Queued(QueuedMethods):
    """A queued call and its Future in one."""

    __slots__ = QUEUED_SLOTS

    def __init__(self, executor: AsyncExecutor, run: Callable[[], Any]) -> None:
        self._init_queued(executor, run)


class AsyncExecutor:
    def __init__(self, name: str, pickup_delay: float = DEFAULT_PICKUP_DELAY) -> None:
        self._name = name
        self.items: deque[QueuedMethods] = deque()
        self.futures_lock = threading.Lock()  # the queued calls' futures share it
        #: the thread running queued calls now (its ident), else 0: a blocking call made by
        #: another thread waits for it (``drain``); one made inside a queued call does not
        self.runner = 0
        self._cond = threading.Condition()
        self._running = threading.Lock()  # held by whoever runs queued calls
        #: threads waiting for a call that another thread may run (``_wait_for_runner``), and
        #: the condition a runner notifies them on
        self._waiters = 0
        self._progress = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._idle = True  # the worker sleeps until a submission wakes it
        self._hurry = False
        self._delay = pickup_delay
        self._callbacks = CallbackThreads(f"{name}-callbacks")

    # -- the caller's side ---------------------------------------------------------------------
    def submit(self, run: Callable[[], Any]) -> Queued:
        """Queue ``run``; its Future gets its result or error."""
        if self._stopped:
            raise RuntimeError(f"{self._name}: the group was destroyed; no new work is accepted")
        queued = Queued(self, run)
        self.items.append(queued)
        if self._idle:  # (the worker sets _idle before it looks at the queue: no lost wake-up)
            self._wake()
        return queued

    def enqueue(self, queued: QueuedMethods) -> None:
        """Queue an item made by the caller (``queued._init_queued(self, run)`` done): the
        torch backend's Work of a queued call, which is its own Future."""
        if self._stopped:
            raise RuntimeError(f"{self._name}: the group was destroyed; no new work is accepted")
        self.items.append(queued)
        if self._idle:
            self._wake()

    def pending(self) -> bool:
        """Whether a call made now by this thread must first let queued calls run."""
        runner = self.runner
        return runner != _get_ident() if runner else bool(self.items)

    def run_until(self, future: FutureMethods, timeout: float | None = None) -> bool:
        """Run the queued calls up to and including ``future``'s, here; False if this thread
        could not get the run lock within ``timeout`` (None: the calls' own deadlines).

        While another thread runs queued calls (the worker, or a waiter for a later call),
        this one waits for ``future`` itself, not for the run lock: the other may go on to
        calls made after ``future``'s, which may wait for something this thread does next
        (a call on another group that a peer makes first)."""
        me = _get_ident()
        if self.runner == me:
            return False  # waiting, inside a queued call, for a later one: it cannot run yet
        if not self._running.acquire(False) and not self._wait_for_runner(future, timeout):
            return future.settled  # the other thread ran it (else: timed out)
        later: list[Any] = []
        try:
            self.runner = me
            items = self.items
            while not future.settled and items:
                item = items.popleft()
                _execute(item, later)
                if self._waiters:
                    self._progressed()
                if item is future:
                    break
        finally:
            self.runner = 0
            self._running.release()  # (``_let_go``, written out: once per wait)
            if self._waiters:
                self._progressed()
        if later:
            call_back(later)
        return True

    def _wait_for_runner(self, future: FutureMethods, timeout: float | None) -> bool:
        """Another thread runs queued calls: wait until it ran ``future`` (False), or let go
        of the run lock (True: this thread holds it now, ``future`` still queued), or
        ``timeout`` passed (False). Runners say when either may have happened
        (``_progressed``)."""
        give_up = None if timeout is None else _clock() + max(timeout, 0.0)
        progress = self._progress
        with progress:
            self._waiters += 1
            try:
                while True:
                    if future.settled:
                        return False
                    if self._running.acquire(False):
                        return True
                    left = None if give_up is None else give_up - _clock()
                    if left is not None and left <= 0:
                        return False
                    progress.wait(left)
            finally:
                self._waiters -= 1

    def _progressed(self) -> None:
        """A runner completed a call or let go of the run lock: wake ``_wait_for_runner``'s
        waiters, if any (they count themselves under the condition before they look, so a
        runner that finds none has nobody to wake)."""
        if self._waiters:
            with self._progress:
                self._progress.notify_all()

    def _let_go(self) -> None:
        self._running.release()
        self._progressed()

    def drain(self, timeout: float, context: object) -> None:
        """Run every queued call here (after the one the worker may be running): a call made
        now starts after them. DistTimeoutError if the run lock is not free in ``timeout``."""
        if not self._running.acquire(timeout=max(timeout, 0.0)):
            raise DistTimeoutError(
                f"{context}: the async calls before it on this group did not finish in time"
            )
        later: list[Any] = []
        try:
            self.runner = _get_ident()
            items = self.items
            while items:
                _execute(items.popleft(), later)
                self._progressed()
        finally:
            self.runner = 0
            self._let_go()
        call_back(later)

    def hurry(self) -> None:
        """Let the worker start the queued calls now, not after the pickup delay."""
        if self.items and not self._hurry:
            self._wake(hurry=True)  # (from its idle sleep or from waiting out a delay)

    # -- the worker ------------------------------------------------------------------------------
    def _wake(self, hurry: bool = False) -> None:
        with self._cond:
            if self._stopped:
                return
            if hurry:
                self._hurry = True
            if self._thread is None:
                self._idle = False  # awake from its start: submissions need not wake it
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        items = self.items
        delay = self._delay  # the pickup delay now: longer while the worker backs off
        longest = max(self._delay, MAX_BACKED_OFF)
        lingered = 0.0  # seconds of looks since the worker last started a call
        while True:
            if not items:
                if self._stopped:
                    return
                if lingered < _LINGER:
                    with self._cond:  # (hurry and shutdown set their flag and notify under it)
                        if not self._hurry and not self._stopped:
                            self._cond.wait(delay)
                    lingered += delay
                    delay = min(delay * 2, longest)  # nothing to start: look less often
                    continue
                with self._cond:
                    self._idle = True
                    if not items and not self._stopped:
                        self._cond.wait()  # once: a submission wakes it, taken or not
                    self._idle = False
                delay, lingered = self._delay, 0.0  # a quiet worker starts at its pace
                continue
            try:
                head = items[0]
            except IndexError:  # a waiter took it meanwhile
                continue
            age = _clock() - head.submitted
            if age < delay and not self._hurry and not self._stopped:
                with self._cond:
                    if not self._hurry and not self._stopped:
                        self._cond.wait(delay - age)
                if not items or items[0] is not head:  # a waiter took it: back off
                    lingered += delay - age
                    delay = min(delay * 2, longest)
                continue
            later: list[Any] = []
            self._running.acquire()
            self.runner = _get_ident()
            try:
                while items and (self._hurry or self._stopped or _clock() - items[0].submitted >= delay):
                    _execute(items.popleft(), later)
                    self._progressed()
                self._hurry = False
            finally:
                self.runner = 0
                self._let_go()
            delay, lingered = self._delay, 0.0  # the worker was needed: back to its pace
            if later:  # not here: a callback that waits for a later call would wait for us
                self._callbacks.hand_over(later)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting work; let queued work finish (or fail) for up to ``timeout``."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)  # (a first submission always starts the worker)
        self._callbacks.stop(timeout)


def _execute(queued: QueuedMethods, later: list[Any]) -> None:
    """Run one queued call and complete its future; its callbacks go to ``later``, to run
    once the run lock is let go (a callback may make another call on the group)."""
    run, queued.run = queued.run, _ran  # (its closure, and the views it holds, go now)
    try:
        result = run()
    except BaseException as exc:  # noqa: BLE001 — delivered through the future
        callbacks = queued.settle(None, exc)
    else:
        callbacks = queued.settle(result, None)
    if callbacks:
        later.append((queued, callbacks))


def _ran() -> None:
    raise RuntimeError("this queued call has already run")
