"""torch's Work and Future for accord's operations.

Owns: ``TorchWork`` — a ``torch.distributed.Work`` (through torch's Python trampoline, so C++
callers such as DDP's reducer reach ``wait`` and ``get_future``) over one accord Work (the
coalesced forms join theirs into one: ``Work.joined``) or an already finished result; and
``QueuedTorchWork``, the Work of an async call on a short path, which is its own queue item
and accord Future (one object per call, not three: the commonest async use, call then wait,
pays for each object it makes).
``wait`` from Python raises accord's own error (its class and message); the torch Future
(made only when somebody asks for it) completes from accord's completion callback, on
whatever thread finishes the operation, with the list of output tensors as its value, or
with the error. Must not know about collectives or the store.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ...group.executor import QUEUED_SLOTS, AsyncExecutor, QueuedMethods
from ...group.work import FutureMethods, wait_at_most
from ...group.work import Work as AccordWork

#: Held while a TorchWork makes its Future (rare: DDP's hooks, then()): one for all of them.
_MAKING_FUTURES = threading.Lock()


_init_work = dist.Work.__init__


class _TorchWorkMethods:
    """What both Works below do alike (a slot-free mixin, before ``dist.Work`` in their bases:
    these override its methods)."""

    __slots__ = ()
    _name: str
    _outputs: list[Any]
    if TYPE_CHECKING:

        def wait(self, timeout: timedelta = ...) -> bool: ...
        def is_completed(self) -> bool: ...
        def source_rank(self) -> int: ...

    def __repr__(self) -> str:
        return f"<accord TorchWork {self._name} {'completed' if self.is_completed() else 'pending'}>"

    def result(self) -> list[Any]:
        self.wait()
        return self._outputs

    def _source_rank(self) -> int:
        return self.source_rank()

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        """CPU work has no streams: nothing to block."""


class TorchWork(_TorchWorkMethods, dist.Work):
    """The handle torch's API returns for one accord operation (or a coalesced few, joined
    into one accord Work).

    Made once per async call, so it is slotted and calls torch's constructor directly
    (0.46 µs to make, against 0.75 with ``super().__init__`` and an instance dict)."""

    __slots__ = ("_name", "_outputs", "_work", "__dict__")  # (__dict__: the rare ones below)
    _source: int | None = None
    _future: torch.futures.Future | None = None  # made on the first get_future

    def __init__(
        self, name: str, outputs: list[Any], work: AccordWork | None = None, source: int | None = None
    ) -> None:
        _init_work(self)
        self._name = name
        self._outputs = outputs
        self._work = work  # None: finished in the caller's thread already
        if source is not None:
            self._source = source

    # -- waiting ----------------------------------------------------------------------------
    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        work = self._work
        if work is not None:
            work.wait(timeout if timeout else None)
        return True

    def is_completed(self) -> bool:
        work = self._work
        return work is None or work.is_completed()

    def is_success(self) -> bool:
        work = self._work
        return work is None or work.is_success()

    def exception(self) -> BaseException | None:
        work = self._work
        return None if work is None else work.exception()

    def source_rank(self) -> int:
        if self._source is not None:
            return self._source
        if self._work is None:
            raise ValueError(f"{self._name}: source_rank() is only defined for receives")
        return self._work.source_rank()

    # -- the torch Future -------------------------------------------------------------------
    def get_future(self) -> torch.futures.Future:
        """A torch Future whose value is the list of output tensors (made on first call);
        it completes on the thread that finishes the operation.

        A failed operation's Future is failed in C++, not only in Python: a Python Future's
        ``set_exception`` completes it *successfully* with the exception object as its
        value, which C++ readers take for the result (DDP's reducer read it as the reduced
        gradients, found no tensor in it and crashed the process). So the Future returned is
        the ``then`` of the one we complete: a callback that raises fails it properly, and
        ``wait()`` raises (a RuntimeError naming accord's error, as torch's backends raise)."""
        work = self._work
        if work is None:
            with _MAKING_FUTURES:
                if self._future is None:
                    self._future = torch.futures.Future()
                    self._future.set_result(self._outputs)
                return self._future
        return _torch_future(self, work.get_future(), self._outputs)


class QueuedTorchWork(_TorchWorkMethods, dist.Work, QueuedMethods):
    """The Work of an async call on a short path (``dist.all_reduce(t, async_op=True)``,
    the functional collectives): the queued call and its accord Future in one object
    (``Planner.defer``'s ``make``). As ``TorchWork`` over a queued call, less the two
    objects between: waiting runs the call here, with the calls queued before it."""

    __slots__ = (*QUEUED_SLOTS, "_name", "_outputs", "_future")

    def __init__(self, executor: AsyncExecutor, run: Any, name: str, outputs: list[Any]) -> None:
        _init_work(self)
        self._init_queued(executor, run)
        self._name = name
        self._outputs = outputs
        self._future: torch.futures.Future | None = None

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        if timeout and not self.settled:
            wait_at_most(self, timeout, self._name)  # (the worker runs it, if in time)
        QueuedMethods.wait(self)  # (runs it here if nobody has; raises its error)
        return True

    def is_completed(self) -> bool:
        return self.settled

    def is_success(self) -> bool:
        return self.settled and self._error is None

    def exception(self) -> BaseException | None:
        return self._error if self.settled else None

    def source_rank(self) -> int:
        raise ValueError(f"{self._name}: source_rank() is only defined for receives")

    def get_future(self) -> torch.futures.Future:
        """As ``TorchWork.get_future``. Asking for it says nobody will run the call by waiting
        (DDP's hooks): the worker starts it now."""
        self.hurry()
        return _torch_future(self, self, self._outputs)


def _torch_future(work: Any, done_by: FutureMethods, outputs: list[Any]) -> torch.futures.Future:
    """``work``'s torch Future (made on the first call, kept in ``work._future``), completed
    when accord's future ``done_by`` completes: with ``outputs``, or failed with its error."""
    with _MAKING_FUTURES:
        made: torch.futures.Future | None = work._future
        if made is not None:
            return made
        future: torch.futures.Future[list[Any]] = torch.futures.Future()
        result = work._future = future.then(_value_or_raise)

    def finished(done: Any) -> None:
        if done.error is not None:
            future.set_exception(done.error)
        else:
            future.set_result(outputs)

    done_by.add_done_callback(finished)
    return result


def _value_or_raise(future: torch.futures.Future) -> Any:
    return future.value()  # (raises the operation's error: the Future ``then`` made fails)


def completed(name: str, outputs: list[Any], source: int | None = None) -> TorchWork:
    """The Work of an operation that already finished in the caller's thread."""
    return TorchWork(name, outputs, source=source)
