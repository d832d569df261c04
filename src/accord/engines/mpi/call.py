"""One call on an MPI group: ``MpiCall``, what an MPI algorithm runs against.

Owns: the call's communicators, deadline and context; ``complete(requests, finish)`` —
wait now (a blocking call) or keep the requests for the call's Work (``async_op=True``),
then run ``finish`` (AVG's division, copying out of a scratch buffer); and the ``Peers``
interface (isend / irecv / irecv_any / wait / settle / scratch) over MPI point-to-point on
the group's message communicator, for accord's message-based calls (object collectives,
monitored_barrier). Requests a failed call leaves behind are cancelled or kept alive with
their buffers, never freed under MPI's feet. Must not know about the API.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import CollectiveMismatchError, DistTimeoutError
from ...timeouts import Deadline
from . import runtime

Finish = Callable[[], None]


class MpiCall:
    """The Peers and the completion of one collective call on an MPI group."""

    def __init__(
        self, engine: Any, op: str, seq: int, deadline: Deadline, deferred: bool, fp: Any = None
    ) -> None:
        group = engine.group
        self.rank, self.size, self.tunables = group.rank(), group.size(), group.tunables
        self.comm, self.msg_comm = engine.comm, engine.msg_comm
        self.deadline = deadline
        self._group, self._engine, self._op, self._seq = group, engine, op, seq
        self._deferred = deferred
        self._requests: list[Any] = []
        self._finishers: list[Finish] = []
        self._keep: list[Any] = []  # buffers the pending requests use
        self._lock = threading.Lock()
        self.finished = False
        #: Set by the group when this call's MPI function runs the check that every rank
        #: called the same itself (``agree()``), maybe with its data in the check's record.
        self.agree: Callable[[], None] | None = None
        self.agreement = engine.agreement
        #: The call's fingerprint: what decides, alike on every rank, whether its data rides
        #: on the check (``agreement.record_bytes``).
        self.fp = fp

    def __str__(self) -> str:
        context: str = self._group.context(self._op, self._seq)
        return context

    # -- MPI collectives ------------------------------------------------------------------------
    def complete(self, requests: Sequence[Any], finish: Finish | None = None, keep: Any = None) -> None:
        """The call's MPI requests: wait for them now, or (async) when its Work is waited on.
        ``finish`` runs once they completed; ``keep`` stays referenced until then."""
        self._requests.extend(requests)
        if finish is not None:
            self._finishers.append(finish)
        if keep is not None:
            self._keep.append(keep)
        if not self._deferred:
            self.wait_all()

    def test(self) -> bool:
        """Whether every request completed (finishing the call if so); never blocks."""
        with self._lock:
            if self.finished:
                return True
            if not runtime.load().Request.Testall(self._requests):
                return False
            self._finish()
            return True

    def wait_all(self) -> None:
        """Wait for every request (DistTimeoutError at the deadline), then finish."""
        with self._lock:
            if self.finished:
                return
            mpi = runtime.load()
            requests = self._requests
            test = requests[0].Test if len(requests) == 1 else lambda: mpi.Request.Testall(requests)
            if requests and not runtime.wait_until(test, self.deadline):
                self._engine.abandon(requests, self._keep)
                raise runtime.timed_out(str(self), self.deadline, "the MPI collective")
            self._finish()

    def _finish(self) -> None:
        self.finished = True
        self._requests, self._keep = [], []
        for finish in self._finishers:
            finish()

    # -- Peers: accord's message-based calls over MPI point-to-point --------------------------
    def isend(self, peer: int, buf: np.ndarray, step: int) -> _Handle:
        data = np.ascontiguousarray(buf).view(np.uint8)
        return _Handle(self.msg_comm.Isend(runtime.as_bytes(data), peer, step), keep=data)

    def irecv(self, peer: int, buf: np.ndarray, step: int) -> _Handle:
        handle = _Handle(self.msg_comm.Irecv(runtime.as_bytes(buf), peer, step), keep=buf)
        handle.expect = buf.nbytes
        return handle

    def irecv_any(self, peer: int, step: int) -> _Handle:
        """A receive of a message of any size (its bytes in ``handle.buf`` once done)."""
        return _Handle(None, probe=(self.msg_comm, peer, step))

    def wait(self, *handles: _Handle) -> None:
        if not runtime.wait_until(lambda: all(h.poll() for h in handles), self.deadline):
            self._cancel(handles)
            raise DistTimeoutError(
                f"{self}: a message from a peer did not arrive in "
                f"{self.deadline.budget:g} s. Are all ranks alive, and did every "
                f"rank call the same collectives in the same order?"
            )
        for handle in handles:
            if handle.error is not None:
                raise handle.error

    def settle(self, *handles: _Handle) -> None:
        """Wait until each handle is done or the deadline passed (the caller judges each)."""
        if not runtime.wait_until(lambda: all(h.poll() for h in handles), self.deadline):
            self._cancel(handles)

    def _cancel(self, handles: Sequence[_Handle]) -> None:
        pending = [h for h in handles if not h.done]
        for handle in pending:
            handle.cancel()
        self._engine.abandon([h.request for h in pending if h.request is not None], [h.keep for h in pending])

    def scratch(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray:
        """Scratch memory for this call: the group's reused buffers for a blocking call, a
        buffer of its own for an async one (it outlives the next call)."""
        if self._deferred:
            return np.empty(count, dtype)
        array: np.ndarray = self._group.calls.scratch.array(count, dtype, which)
        return array


class _Handle:
    """One send or receive of a message-based call (``done``, ``error``, ``buf``)."""

    __slots__ = ("request", "keep", "probe", "done", "error", "buf", "expect", "source")

    def __init__(self, request: Any, keep: Any = None, probe: tuple[Any, int, int] | None = None) -> None:
        self.request, self.keep, self.probe = request, keep, probe
        self.done = False
        self.error: BaseException | None = None
        self.buf: Any = None
        self.expect = -1
        self.source: int | None = None

    def poll(self) -> bool:
        if self.done:
            return True
        mpi = runtime.load()
        if self.probe is not None:
            comm, peer, tag = self.probe
            status = mpi.Status()
            message = comm.Improbe(peer, tag, status)
            if message is None:
                return False
            data = bytearray(status.Get_count(mpi.BYTE))
            message.Recv([data, mpi.BYTE])
            self.buf, self.source, self.done = memoryview(data), status.Get_source(), True
            return True
        status = mpi.Status()
        if not self.request.Test(status):
            return False
        self.done = True
        got = status.Get_count(mpi.BYTE)
        if self.expect >= 0 and got != self.expect:
            self.error = CollectiveMismatchError(
                f"a peer sent {got} bytes where {self.expect} were "
                f"expected: the ranks called different collectives"
            )
        return True

    def cancel(self) -> None:
        if self.request is not None and not self.done:
            try:
                self.request.Cancel()
            except Exception:  # noqa: BLE001 — a send may not be cancellable; it is kept alive
                pass
