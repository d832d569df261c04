"""Point-to-point calls of an MPI group: send, recv (from one rank or any), isend, irecv,
and the frames of send_object_list / recv_object_list.

Owns: MPI's Isend/Irecv on the group's communicator with the user's tag (so they never meet
the collectives, which MPI keeps apart), waiting within the group's timeout, the sender's
rank of an any-source receive, a receive whose message has the wrong size (an error, as
on accord's transport), the flight recorder's p2p entries, and the Works of isend/irecv.
Object frames travel on the group's message communicator under their own tag. Must not
know about the API.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...arrays import as_buffer
from ...errors import ArgumentError, ArgumentTypeError, DistTimeoutError
from ...group.work import Future, Work
from ...timeouts import Deadline, format_seconds
from . import runtime

OBJECT_TAG = 30001  # object frames on the message communicator (collectives use small steps)


class MpiP2P:
    """The sends and receives of one group on MPI (``MpiEngine``)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._group = engine.group

    def _tag(self, tag: Any) -> int:
        if isinstance(tag, bool) or not isinstance(tag, int):
            raise ArgumentTypeError(f"tag must be an int, got {type(tag).__name__}")
        upper = runtime.load().COMM_WORLD.Get_attr(runtime.load().TAG_UB)
        if not 0 <= tag <= upper:
            raise ArgumentError(f"tag {tag} is out of MPI's range 0..{upper} (backend mpi)")
        return tag

    def _peer(self, rank: int, what: str) -> int:
        group = self._group
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < group.size():
            raise ArgumentError(f"{what}={rank} is out of range for a group of size {group.size()}")
        if rank == group.rank():
            raise ArgumentError(
                f"{what} is this rank itself (group rank {rank}); a rank cannot send "
                f"to or receive from itself"
            )
        return rank

    def _post_send(self, tensor: Any, dst: int, tag: int, op: str) -> _Posted:
        group = self._group
        buf = as_buffer(tensor, writable=False)
        dst, tag = self._peer(dst, "dst"), self._tag(tag)
        peer = group.global_rank_of(dst)
        context = f"{op} to rank {peer} (tag {tag}) on rank {group.global_rank}"
        data = np.ascontiguousarray(buf.flat)
        entry = group.recorder.p2p_start(op, peer, tag, data.nbytes)
        request = self._engine.comm.Isend(runtime.as_bytes(data), dst, tag)
        return _Posted(request, data, entry, context, buf, peer, Deadline.after(group.calls.timeout), False)

    def _post_recv(self, tensor: Any, src: int | None, tag: int, op: str) -> _Posted:
        group = self._group
        buf = as_buffer(tensor, writable=True)
        tag = self._tag(tag)
        source = runtime.load().ANY_SOURCE if src is None else self._peer(src, "src")
        peer = None if src is None else group.global_rank_of(src)
        context = (
            f"{op} from {'any rank' if peer is None else f'rank {peer}'} (tag {tag}) "
            f"on rank {group.global_rank}"
        )
        entry = group.recorder.p2p_start(op, peer, tag, buf.nbytes)
        request = self._engine.comm.Irecv(runtime.as_bytes(buf.flat), source, tag)
        return _Posted(
            request, buf.flat, entry, context, buf, peer, Deadline.after(group.calls.timeout), True
        )

    def _finish(self, posted: _Posted) -> int | None:
        """Wait for a posted send or receive; the sender's group rank of a receive."""
        group = self._group
        if not runtime.wait_until(posted.test, posted.deadline):
            exc = DistTimeoutError(
                f"{posted.context}: did not complete in {format_seconds(posted.deadline.budget)}. "
                f"Is the peer alive, and did it call the matching "
                f"{'send' if posted.receive else 'recv'} with the same tag?"
            )
            if posted.receive:
                posted.request.Cancel()
            self._engine.abandon([posted.request], posted.data)
            group.recorder.p2p_end(posted.entry, exc)
            if group.monitor is not None:
                group.monitor.p2p_timed_out(group, exc, posted.peer)
            raise exc
        if not posted.receive:
            group.recorder.p2p_end(posted.entry)
            return None
        mpi = runtime.load()
        source = posted.status.Get_source()
        got = posted.status.Get_count(mpi.BYTE)
        if got != posted.data.nbytes:
            exc2 = ArgumentError(
                f"{posted.context}: rank {group.global_rank_of(source)} sent {got} "
                f"bytes, but the receive buffer has {posted.data.nbytes}; sizes "
                f"must match"
            )
            group.recorder.p2p_end(posted.entry, exc2)
            raise exc2
        group.recorder.p2p_end(posted.entry, peer=group.global_rank_of(source))
        posted.buf.finish()
        return int(source)

    def send(self, tensor: Any, dst: int, tag: int) -> None:
        self._finish(self._post_send(tensor, dst, tag, "send"))

    def recv(self, tensor: Any, src: int | None, tag: int) -> int:
        source = self._finish(self._post_recv(tensor, src, tag, "recv"))
        assert source is not None
        return source

    def isend(self, tensor: Any, dst: int, tag: int) -> Work:
        return self._work(self._post_send(tensor, dst, tag, "isend"), [tensor])

    def irecv(self, tensor: Any, src: int | None, tag: int) -> Work:
        return self._work(self._post_recv(tensor, src, tag, "irecv"), [tensor])

    def _work(self, posted: _Posted, result: list[Any]) -> Work:
        source: list[int | None] = [None]

        def settle(wait: bool) -> None:
            if future.settled or (not wait and not posted.test()):
                return
            try:
                source[0] = self._finish(posted)
            except BaseException as exc:  # noqa: BLE001 — handed to the Work
                future.set_exception(exc)
                return
            future.set_result(result)

        future = Future(drive=lambda _timeout: settle(True), poll=lambda: settle(False))
        return Work(posted.context, result, future, source=(lambda: source[0]) if posted.receive else None)  # type: ignore[arg-type,return-value]

    # -- object frames --------------------------------------------------------------------------
    def send_frames(self, frames: list[Any], dst: int, op: str) -> None:
        group = self._group
        dst = self._peer(dst, "dst")
        context = f"{op} to rank {group.global_rank_of(dst)} on rank {group.global_rank}"
        arrays = [np.frombuffer(f, dtype=np.uint8) for f in frames]
        requests = [self._engine.msg_comm.Isend(runtime.as_bytes(a), dst, OBJECT_TAG) for a in arrays]
        deadline = Deadline.after(group.calls.timeout)
        if not runtime.wait_until(lambda: runtime.load().Request.Testall(requests), deadline):
            self._engine.abandon(requests, arrays)
            raise DistTimeoutError(
                f"{context}: not received in {format_seconds(deadline.budget)}. "
                f"Did the peer call recv_object_list?"
            )

    def recv_frames(self, src: int | None, op: str) -> tuple[list[Any], int]:
        """The frames of one object message (from ``src``, or any rank) and its sender."""
        from ...group import pickling

        group = self._group
        mpi = runtime.load()
        source = mpi.ANY_SOURCE if src is None else self._peer(src, "src")
        context = (
            f"{op} from {'any rank' if src is None else f'rank {group.global_rank_of(src)}'} "
            f"on rank {group.global_rank}"
        )
        deadline = Deadline.after(group.calls.timeout)
        head, sender = self._probe_receive(source, deadline, context)
        frames = [head]
        for _ in range(pickling.buffer_count(head)):
            frames.append(self._probe_receive(sender, deadline, context)[0])
        return frames, sender

    def _probe_receive(self, source: int, deadline: Deadline, context: str) -> tuple[memoryview, int]:
        mpi = runtime.load()
        comm = self._engine.msg_comm
        status = mpi.Status()
        found: list[Any] = []

        def probe() -> bool:
            message = comm.Improbe(source, OBJECT_TAG, status)
            if message is not None:
                found.append(message)
            return bool(found)

        if not runtime.wait_until(probe, deadline):
            raise DistTimeoutError(
                f"{context}: nothing arrived in {format_seconds(deadline.budget)}. "
                f"Did the peer call send_object_list?"
            )
        data = bytearray(status.Get_count(mpi.BYTE))
        found[0].Recv([data, mpi.BYTE])
        return memoryview(data), int(status.Get_source())


class _Posted:
    """One posted send or receive: its request, buffers, recorder entry, status."""

    __slots__ = (
        "request",
        "data",
        "entry",
        "context",
        "buf",
        "peer",
        "deadline",
        "receive",
        "status",
        "done",
    )

    def __init__(
        self,
        request: Any,
        data: np.ndarray,
        entry: list[Any],
        context: str,
        buf: Any,
        peer: int | None,
        deadline: Deadline,
        receive: bool,
    ) -> None:
        self.request, self.data, self.entry, self.context = request, data, entry, context
        self.buf, self.peer, self.deadline, self.receive = buf, peer, deadline, receive
        self.status = runtime.load().Status()
        self.done = False

    def test(self) -> bool:
        """Whether it completed (the status then holds the sender and the size)."""
        if not self.done and self.request.Test(self.status):
            self.done = True
        return self.done
