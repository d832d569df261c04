"""torch's Work and Future for accord's operations.

Owns: ``TorchWork`` — a ``torch.distributed.Work`` (through torch's Python trampoline, so C++
callers such as DDP's reducer reach ``wait`` and ``get_future``) over an accord Work or an
already finished result. ``wait`` from Python raises accord's own error (its class and
message); the torch Future (made only when somebody asks for it) completes from accord's
completion callback, on whatever thread finishes the operation, with the list of output
tensors as its value, or with the error. Must not know about collectives or the store.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ...group.work import Work as AccordWork

#: Held while a TorchWork makes its Future (rare: DDP's hooks, then()): one for all of them.
_MAKING_FUTURES = threading.Lock()


class TorchWork(dist.Work):
    """The handle torch's API returns for one accord operation (or a coalesced few)."""

    _source: int | None = None
    _future: torch.futures.Future | None = None  # made on the first get_future

    def __init__(
        self, name: str, outputs: list[Any], works: list[AccordWork] | None = None, source: int | None = None
    ) -> None:
        super().__init__()  # (one per async call: set only what every Work needs)
        self._name = name
        self._outputs = outputs
        self._works = works or []  # empty: finished in the caller's thread already
        if source is not None:
            self._source = source

    def __repr__(self) -> str:
        return f"<accord TorchWork {self._name} {'completed' if self.is_completed() else 'pending'}>"

    # -- waiting ----------------------------------------------------------------------------
    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        for work in self._works:
            work.wait(timeout if timeout else None)
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self._works)

    def is_success(self) -> bool:
        return all(work.is_success() for work in self._works)

    def exception(self) -> BaseException | None:
        return next((e for e in (w.exception() for w in self._works) if e is not None), None)

    def result(self) -> list[Any]:
        self.wait()
        return self._outputs

    def source_rank(self) -> int:
        if self._source is not None:
            return self._source
        if len(self._works) != 1:
            raise ValueError(f"{self._name}: source_rank() is only defined for receives")
        return self._works[0].source_rank()

    def _source_rank(self) -> int:
        return self.source_rank()

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        """CPU work has no streams: nothing to block."""

    # -- the torch Future -------------------------------------------------------------------
    def get_future(self) -> torch.futures.Future:
        """A torch Future whose value is the list of output tensors (made on first call);
        it completes on the thread that finishes the last operation.

        A failed operation's Future is failed in C++, not only in Python: a Python Future's
        ``set_exception`` completes it *successfully* with the exception object as its
        value, which C++ readers take for the result (DDP's reducer read it as the reduced
        gradients, found no tensor in it and crashed the process). So the Future returned is
        the ``then`` of the one we complete: a callback that raises fails it properly, and
        ``wait()`` raises (a RuntimeError naming accord's error, as torch's backends raise)."""
        with _MAKING_FUTURES:
            if self._future is not None:
                return self._future
            if not self._works:
                done = self._future = torch.futures.Future()
                done.set_result(self._outputs)
                return done
            future: torch.futures.Future[list[Any]] = torch.futures.Future()
            self._future = future.then(_value_or_raise)
        result = self._future
        pending = [len(self._works)]
        first_error: list[BaseException] = []
        lock = threading.Lock()

        def one_done(done: Any) -> None:
            with lock:
                if done.error is not None and not first_error:
                    first_error.append(done.error)
                pending[0] -= 1
                last = pending[0] == 0
            if last:
                if first_error:
                    future.set_exception(first_error[0])  # type: ignore[arg-type]  # (torch types it as T)
                else:
                    future.set_result(self._outputs)

        for work in self._works:
            work.get_future().add_done_callback(one_done)
        return result


def _value_or_raise(future: torch.futures.Future) -> Any:
    return future.value()  # (raises the operation's error: the Future ``then`` made fails)


def completed(name: str, outputs: list[Any], source: int | None = None) -> TorchWork:
    """The Work of an operation that already finished in the caller's thread."""
    return TorchWork(name, outputs, source=source)
