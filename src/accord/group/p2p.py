"""Point-to-point messages on a ProcessGroup: send, recv (also from any source), isend, irecv.

Owns: p2p argument checks, posting on the group's channel with the user's tag, and p2p Work
(completed by whoever waits, or by the transport's background progress). A p2p failure does
not break the group, except a timeout while data was already landing in the buffer. Ranks
here are group ranks. Must not know about the default world or env variables.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from .. import profiling
from ..arrays import Buffer, as_buffer
from ..errors import ArgumentError, ArgumentTypeError, DistTimeoutError
from ..timeouts import Deadline
from ..transport.matching import RecvRequest, SendRequest
from ..transport.wire import Fingerprint, FrameKind
from .call import byte_view
from .dispatch import check_group_rank
from .process_group import ProcessGroup
from .recorder import P2pRecord
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
        raise ArgumentError(
            f"{what}={rank} is this rank itself; a rank cannot send to or receive "
            f"from itself (copy the tensor instead)"
        )
    return rank


def _post_send(
    group: ProcessGroup, tensor: Any, dst: int, tag: int, op: str
) -> tuple[SendRequest, Deadline, str, P2pRecord]:
    """Post a send; also returns its flight-recorder entry (ended by the caller)."""
    _peer(group, dst, "dst")
    buf = as_buffer(tensor, writable=False)
    peer = group.global_rank_of(dst)
    context = f"send to rank {peer} (tag {_check_tag(tag)}) on rank {group.global_rank}"
    deadline = Deadline.after(group.calls.timeout)
    fp = Fingerprint(0, 0, buf.dtype_code, buf.count, -1)
    payload = byte_view(buf.flat)
    entry = group.recorder.p2p_start(op, peer, tag, payload.nbytes)
    try:
        req = group.planner.channel.isend(peer, FrameKind.P2P, 0, 0, tag, fp, payload, context)
    except BaseException as exc:
        group.recorder.p2p_end(entry, exc)
        raise
    return req, deadline, context, entry


def _post_recv(
    group: ProcessGroup, tensor: Any, src: int | None, tag: int, op: str
) -> tuple[RecvRequest, Deadline, str, Buffer, P2pRecord]:
    """Post a receive; also returns its flight-recorder entry (ended by the caller)."""
    buf = as_buffer(tensor, writable=True)
    source = None if src is None else group.global_rank_of(_peer(group, src, "src"))
    origin = "any rank" if source is None else f"rank {source}"
    context = f"recv from {origin} (tag {_check_tag(tag)}) on rank {group.global_rank}"
    deadline = Deadline.after(group.calls.timeout)
    expect = Fingerprint(0, 0, buf.dtype_code, buf.count, -1)
    entry = group.recorder.p2p_start(op, source, tag, buf.nbytes)
    try:
        req = group.planner.channel.irecv(
            source, FrameKind.P2P, 0, 0, tag, expect, byte_view(buf.flat), context
        )
    except BaseException as exc:
        group.recorder.p2p_end(entry, exc)
        raise
    return req, deadline, context, buf, entry


def _timed_out(group: ProcessGroup, exc: BaseException, req: SendRequest | RecvRequest) -> None:
    """Let the world's monitor say what the peer was doing (the group goes on)."""
    monitor = group.monitor
    if monitor is None:
        return
    peer = req.dst if isinstance(req, SendRequest) else req.src
    try:
        monitor.p2p_timed_out(group, exc, peer)
    except Exception:  # noqa: BLE001 — diagnostics must never hide the real error
        pass


def send(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> None:
    """Blocking send, in the caller's thread (no Work, no background progress)."""
    if group.engine.p2p is not None:
        return group.engine.p2p.send(tensor, dst, tag)
    event = _event("send", tensor)
    try:
        _send(group, tensor, dst, tag)
    finally:
        if event is not None:
            profiling.end(event)


def _send(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> None:
    req, deadline, context, entry = _post_send(group, tensor, dst, tag, "send")
    try:
        group.planner.channel.wait([req], deadline, context)
    except DistTimeoutError as exc:
        group.recorder.p2p_end(entry, exc)
        _timed_out(group, exc, req)
        raise
    except BaseException as exc:
        group.recorder.p2p_end(entry, exc)
        raise
    group.recorder.p2p_end(entry)


def recv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> int:
    """Blocking receive; returns the sender's group rank."""
    if group.engine.p2p is not None:
        return group.engine.p2p.recv(tensor, src, tag)
    event = _event("recv" if src is not None else "recv_any", tensor)
    try:
        return _recv(group, tensor, src, tag)
    finally:
        if event is not None:
            profiling.end(event)


def _recv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> int:
    req, deadline, context, buf, entry = _post_recv(group, tensor, src, tag, "recv")
    try:
        group.planner.channel.wait([req], deadline, context)
    except DistTimeoutError as exc:
        group.recorder.p2p_end(entry, exc)
        if not group.planner.channel.cancel(req) and req.claimed:
            group.calls.break_group(context, exc)
        else:
            _timed_out(group, exc, req)
        raise
    except BaseException as exc:
        group.recorder.p2p_end(entry, exc)
        raise
    group.recorder.p2p_end(entry, peer=req.source)
    buf.finish()
    assert req.source is not None
    return group.group_rank_of(req.source)


def isend(group: ProcessGroup, tensor: Any, dst: int, tag: int) -> Work:
    if group.engine.p2p is not None:
        return group.engine.p2p.isend(tensor, dst, tag)
    req, deadline, context, entry = _post_send(group, tensor, dst, tag, "isend")
    return _work(group, req, deadline, context, [tensor], buf=None, event=_event("send", tensor), entry=entry)


def irecv(group: ProcessGroup, tensor: Any, src: int | None, tag: int) -> Work:
    if group.engine.p2p is not None:
        return group.engine.p2p.irecv(tensor, src, tag)
    req, deadline, context, buf, entry = _post_recv(group, tensor, src, tag, "irecv")
    event = _event("recv" if src is not None else "recv_any", tensor)
    return _work(group, req, deadline, context, [tensor], buf=buf, event=event, entry=entry)


def _work(
    group: ProcessGroup,
    req: SendRequest | RecvRequest,
    deadline: Deadline,
    context: str,
    result: list[Any],
    buf: Any,
    event: Any,
    entry: P2pRecord,
) -> Work:
    """The Work of a posted isend/irecv; its profiler ``event`` (if any) and its recorder
    ``entry`` end with it."""
    channel = group.planner.channel
    recorder = group.recorder
    events = [event] if event is not None else []

    def end_event() -> None:
        try:
            profiling.end(events.pop())
        except IndexError:  # no event, or it ended already
            pass

    settled = threading.Lock()  # taken once, by the first thread to see the request done

    def settle() -> None:
        if not req.done or future.settled or not settled.acquire(blocking=False):
            return
        end_event()  # the entry's end is when this rank saw it done
        if req.error is not None:
            recorder.p2p_end(entry, req.error)
            future.set_exception(req.error)
            return
        if buf is not None:
            buf.finish()
        recorder.p2p_end(entry, peer=getattr(req, "source", None))
        future.set_result(result)

    def drive(timeout: float | None) -> None:
        limit = deadline if timeout is None else deadline.earlier(Deadline.after(timeout))
        try:
            channel.wait([req], limit, context)
        except DistTimeoutError as exc:
            if limit is not deadline:
                return  # only the caller's shorter Work.wait timeout passed: the operation goes on
            end_event()
            recorder.p2p_end(entry, exc)
            if isinstance(req, RecvRequest) and not channel.cancel(req) and req.claimed:
                group.calls.break_group(context, exc)
            else:
                _timed_out(group, exc, req)
            future.set_exception(exc)
            raise
        except BaseException as exc:
            end_event()
            recorder.p2p_end(entry, exc)
            future.set_exception(exc)
            raise
        settle()

    future = Future(drive=drive, poll=settle)
    group.planner.mesh.watch(req, on_done=settle)  # completes the future in the background too
    # (asked once the receive completed: its source is set then)
    source = (lambda: group.group_rank_of(cast(int, req.source))) if isinstance(req, RecvRequest) else None
    return Work(context, result, future, source=source)
