"""The async worker: one thread per group runs ``async_op=True`` calls in submission order.

Owns: the queue and the thread (started lazily, stopped by ``shutdown``), and ``run_inline``:
a caller that waits for a queued call may run it (and the calls queued before it, in order)
in its own thread when the worker is not busy, so that "submit, then wait at once" costs no
thread hop. Blocking calls of accord's own API never come here: they run in the caller's
thread. Must not know about collectives.

``pickup_delay`` (seconds) makes the worker leave a call alone for that long after it was
submitted, so that a caller about to wait for it runs it itself instead of racing the worker;
calls nobody waits for start after that delay.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from .work import Future

_Item = tuple[Callable[[], Any], Future, float]


class AsyncExecutor:
    def __init__(self, name: str, pickup_delay: float = 0.0) -> None:
        self._name = name
        self._items: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._running = threading.Lock()  # held by whoever runs items: the worker or a waiter
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._delay = pickup_delay

    def submit(self, fn: Callable[[], Any], future: Future) -> None:
        with self._cond:
            if self._stopped:
                raise RuntimeError(f"{self._name}: the group was destroyed; no new work is accepted")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._items.append((fn, future, time.monotonic()))
            self._cond.notify()

    def run_inline(self, future: Future) -> bool:
        """Run the queued call of ``future`` here, with every call queued before it; False
        if it is not queued (running or done) or the worker is busy (then just wait)."""
        if not self._running.acquire(blocking=False):
            return False
        try:
            with self._cond:
                index = next((i for i, item in enumerate(self._items) if item[1] is future), -1)
                batch = [self._items.popleft() for _ in range(index + 1)]
            for fn, fut, _ in batch:
                _execute(fn, fut)
            return index >= 0
        finally:
            self._running.release()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopped:
                    self._cond.wait()
                if not self._items:
                    return
                age = time.monotonic() - self._items[0][2]
                if age < self._delay and not self._stopped:
                    self._cond.wait(self._delay - age)
                    continue
            with self._running:
                with self._cond:
                    item = self._items.popleft() if self._items else None
                if item is not None:
                    _execute(item[0], item[1])

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting work; let queued work finish (or fail) for up to ``timeout``."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def _execute(fn: Callable[[], Any], future: Future) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 — delivered through the future
        future.set_exception(exc)
