"""Callbacks of the async calls a group's worker ran, on threads of their own.

Owns: ``CallbackThreads`` and ``call_back``, which runs a batch of completed calls'
callbacks. Split from ``executor`` (the queue and its worker), which hands them over.
Must not know about collectives.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any


def call_back(later: list[Any]) -> None:
    for queued, callbacks in later:
        queued.run_callbacks(callbacks)


class CallbackThreads:
    """Run the callbacks of the calls the worker ran, on threads of their own (started as
    needed: each batch handed over finds a thread free to take it).

    Not on the worker, and never behind a busy callback: a callback may wait for another
    call of the group (DDP's PowerSGD hook waits, inside a then() callback, for an
    all_reduce it just made), which only the worker may be there to run, and whose own
    callbacks (the torch Future it waits for) need a thread of their own meanwhile. A
    waiter that ran a call runs its callbacks itself."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._batches: deque[list[Any]] = deque()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a batch
        self._stopped = False

    def hand_over(self, later: list[Any]) -> None:
        with self._cond:
            self._batches.append(later)
            if len(self._batches) > self._idle:  # none free to take it: one more thread
                thread = threading.Thread(
                    target=self._run, daemon=True, name=f"{self._name}-{len(self._threads)}"
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                while not self._batches and not self._stopped:
                    self._cond.wait()
                self._idle -= 1
                if not self._batches:
                    return
                later = self._batches.popleft()
            call_back(later)

    def stop(self, timeout: float) -> None:
        with self._cond:
            self._stopped = True
            threads = list(self._threads)
            self._cond.notify_all()
        give_up = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, give_up - time.monotonic()))
