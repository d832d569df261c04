"""Point-to-point messages on a ProcessGroup: send, recv (also from any source), isend, irecv.

Owns: p2p argument checks, posting on the group's channel with the user's tag, and p2p Work
(completed by whoever waits, or by the transport's background progress). A p2p failure does
not break the group, except a timeout while data was already landing in the buffer. Ranks
here are group ranks. Must not know about the default world or env variables.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .. import profiling
from ..arrays import Buffer, as_buffer
from ..errors import ArgumentError, ArgumentTypeError, DistTimeoutError
from ..timeouts import Deadline
from ..transport.matching import RecvRequest, SendRequest
from ..transport.wire import Fingerprint, FrameKind
from .collective_ops import check_group_rank
from .call import byte_view
from .process_group import ProcessGroup
from .work import Future, Work


def _event(op: str, tensor: Any) -> Any:
    """The profiler event of this call while torch's profiler records, else None."""
    return profiling.begin_if_recording(op, (tensor,))


def _check_tag(tag: int) -> int:
    if isinstance(tag, bool) or not isinstance(tag, int):
        raise ArgumentTypeError(f"tag must be an int, got {type(tag).__name__}")
    if not -(1 << 63) <= tag < (1 << 63):
        raise ArgumentError(f"tag {tag} does not fit in 64 bits")
    return tag


def _peer(group: ProcessGroup, rank: int, what: str) -> int:
    check_group_rank(group, rank, what)
    if rank == group.rank():
        raise ArgumentError(f"{what}={rank} is this rank itself; a rank cannot send to or receive "
                            f"from itself (copy the tensor instead)")
    return rank


def _post_send(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> tuple[SendRequest, Deadline, str]:
    _peer(group, dst, "dst")
    buf = as_buffer(tensor, writable=False)
    context = f"send to rank {group.global_rank_of(dst)} (tag {_check_tag(tag)}) on rank {group.global_rank}"
    deadline = Deadline.after(group._timeout)
    fp = Fingerprint(0, 0, buf.dtype_code, buf.count, -1)
    req = group.channel.isend(group.global_rank_of(dst), FrameKind.P2P, 0, 0, tag, fp,
                              byte_view(buf.flat), context)
    return req, deadline, context


def _post_recv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> tuple[RecvRequest, Deadline, str, Buffer]:
    buf = as_buffer(tensor, writable=True)
    source = None if src is None else group.global_rank_of(_peer(group, src, "src"))
    origin = "any rank" if source is None else f"rank {source}"
    context = f"recv from {origin} (tag {_check_tag(tag)}) on rank {group.global_rank}"
    deadline = Deadline.after(group._timeout)
    expect = Fingerprint(0, 0, buf.dtype_code, buf.count, -1)
    req = group.channel.irecv(source, FrameKind.P2P, 0, 0, tag, expect, byte_view(buf.flat), context)
    return req, deadline, context, buf


def send(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> None:
    """Blocking send, in the caller's thread (no Work, no background progress)."""
    event = _event("send", tensor)
    try:
        _send(group, tensor, dst, tag)
    finally:
        if event is not None:
            profiling.end(event)


def _send(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> None:
    start = time.monotonic()
    req, deadline, context = _post_send(group, tensor, dst, tag)
    try:
        group.channel.wait([req], deadline, context)
    except BaseException:
        group.recorder.count("send", 0, time.monotonic() - start, failed=True)
        raise
    group.recorder.count("send", req.payload.nbytes, time.monotonic() - start)


def recv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> int:
    """Blocking receive; returns the sender's group rank."""
    event = _event("recv" if src is not None else "recv_any", tensor)
    try:
        return _recv(group, tensor, src, tag)
    finally:
        if event is not None:
            profiling.end(event)


def _recv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> int:
    start = time.monotonic()
    req, deadline, context, buf = _post_recv(group, tensor, src, tag)
    try:
        group.channel.wait([req], deadline, context)
    except DistTimeoutError as exc:
        group.recorder.count("recv", 0, time.monotonic() - start, failed=True)
        if not group.channel.cancel(req) and req.claimed:
            group._break(context, exc)
        raise
    except BaseException:
        group.recorder.count("recv", 0, time.monotonic() - start, failed=True)
        raise
    group.recorder.count("recv", buf.nbytes, time.monotonic() - start)
    buf.finish()
    assert req.source is not None
    return group.group_rank_of(req.source)


def isend(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> Work:
    req, deadline, context = _post_send(group, tensor, dst, tag)
    return _work(group, req, deadline, context, [tensor], buf=None, event=_event("send", tensor))


def irecv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> Work:
    req, deadline, context, buf = _post_recv(group, tensor, src, tag)
    event = _event("recv" if src is not None else "recv_any", tensor)
    return _work(group, req, deadline, context, [tensor], buf=buf, event=event)


def _work(group: ProcessGroup, req: SendRequest | RecvRequest, deadline: Deadline, context: str,
          result: list[Any], buf: Any, event: Any) -> Work:
    """The Work of a posted isend/irecv; its profiler ``event`` (if any) ends with it."""
    channel = group.channel
    op, start = ("irecv" if buf is not None else "isend"), time.monotonic()
    events = [event] if event is not None else []

    def end_event() -> None:
        try:
            profiling.end(events.pop())
        except IndexError:  # no event, or it ended already
            pass

    settled = threading.Lock()  # taken once, by the first thread to see the request done

    def settle() -> None:
        if not req.done or future._done.is_set() or not settled.acquire(blocking=False):
            return
        took = time.monotonic() - start  # until this rank saw it done
        end_event()
        if req.error is not None:
            group.recorder.count(op, 0, took, failed=True)
            future.set_exception(req.error)
            return
        if buf is not None:
            buf.finish()
        group.recorder.count(op, buf.nbytes if buf is not None else req.payload.nbytes, took)
        future.set_result(result)

    def drive(timeout: float | None) -> None:
        limit = deadline if timeout is None else deadline.earlier(Deadline.after(timeout))
        try:
            channel.wait([req], limit, context)
        except DistTimeoutError as exc:
            if limit is not deadline:
                return  # only the caller's shorter Work.wait timeout passed: the operation goes on
            if isinstance(req, RecvRequest) and not channel.cancel(req) and req.claimed:
                group._break(context, exc)
            end_event()
            future.set_exception(exc)
            raise
        except BaseException as exc:
            end_event()
            future.set_exception(exc)
            raise
        settle()

    future = Future(drive=drive, poll=settle)
    group.mesh.watch(req, on_done=settle)  # completes the future in the background too
    source = (lambda: group.group_rank_of(req.source)) if isinstance(req, RecvRequest) else None
    return Work(context, result, future, source=source)
