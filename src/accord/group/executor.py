"""The async worker: one thread per group runs ``async_op=True`` calls in submission order.

Owns: the queue and the thread (started lazily, stopped by ``shutdown``). Blocking calls never
come here: they run in the caller's thread. Must not know about collectives.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from .work import Future

_STOP = object()


class AsyncExecutor:
    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, fn: Callable[[], Any], future: Future) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"{self._name}: the group was destroyed; no new work is accepted")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put((fn, future))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, future = item
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 — delivered through the future
                future.set_exception(exc)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting work; let queued work finish (or fail) for up to ``timeout``."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
        self._queue.put(_STOP)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
