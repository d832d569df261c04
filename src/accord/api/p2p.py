"""The torch-compatible point-to-point functions: send, recv, isend, irecv, P2POp and
batch_isend_irecv, send_object_list and recv_object_list.

Owns: torch's signatures and return values (recv returns the sender's global rank; -1 on a
non-member), their rows of the pipeline (``pipeline.run`` takes every step: no DETAIL check,
no short path), and what a point-to-point call does differently on a device group (NCCL
neither refuses a send to oneself nor has a blocking send). Ranks in signatures are global,
as torch's. Must not take a step of the pipeline itself, nor know how the group sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..arrays import as_buffer
from ..errors import ArgumentError, ShortListError
from ..group import objects, p2p
from ..group.process_group import ProcessGroup
from ..group.work import Work
from .common import check_not_self, device_group, group_rank, resolve_group
from .pipeline import ANY, Call, Rank, run


def _isend_on_device(dg: Any, pg: ProcessGroup, args: tuple[Any, ...], async_op: bool) -> Any:
    tensor, peer, tag = args
    check_not_self(pg, peer, "dst")
    return dg.isend(tensor, peer, tag)


def _irecv_on_device(dg: Any, pg: ProcessGroup, args: tuple[Any, ...], async_op: bool) -> Any:
    return dg.irecv(*args)


def _send_on_device(dg: Any, pg: ProcessGroup, args: tuple[Any, ...], async_op: bool) -> None:
    work = _isend_on_device(dg, pg, args, async_op)
    if work is not None:  # a torch backend may have waited itself (torch allows None)
        work.wait()


def _recv(pg: ProcessGroup, tensor: Any, source: int | None, tag: int) -> int:
    return pg.global_rank_of(p2p.recv(pg, tensor, source, tag))


def _recv_on_device(dg: Any, pg: ProcessGroup, args: tuple[Any, ...], async_op: bool) -> int:
    return pg.global_rank_of(dg.recv(*args))


def _recv_object_list(pg: ProcessGroup, object_list: list[Any], source: int | None) -> int:
    return pg.global_rank_of(objects.recv_object_list(pg, object_list, source))


# The rows (see pipeline.Call); accord's own p2p checks the peer (not oneself) itself.
ISEND = Call("isend", p2p.isend, device=_isend_on_device, rank=Rank(1, "dst"), takes_async_op=False)
IRECV = Call(
    "irecv", p2p.irecv, device=_irecv_on_device, rank=Rank(1, "src", default=ANY), takes_async_op=False
)
SEND = Call("send", p2p.send, device=_send_on_device, rank=Rank(1, "dst"), takes_async_op=False)
RECV = Call(
    "recv",
    _recv,
    device=_recv_on_device,
    rank=Rank(1, "src", default=ANY),
    takes_async_op=False,
    non_member=-1,
)
SEND_OBJECT_LIST = Call(
    "send_object_list", objects.send_object_list, rank=Rank(1, "dst", not_self=True), takes_async_op=False
)
RECV_OBJECT_LIST = Call(
    "recv_object_list",
    _recv_object_list,
    rank=Rank(1, "src", default=ANY, not_self=True),
    takes_async_op=False,
    non_member=-1,
)


def isend(
    tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0, group_dst: int | None = None
) -> Work | None:
    """Start sending ``tensor`` to ``dst``; the tensor must not change until the Work is done."""
    return run(ISEND, group, False, tensor, dst, group_dst, tag)


def irecv(
    tensor: Any, src: int | None = None, group: Any = None, tag: int = 0, group_src: int | None = None
) -> Work | None:
    """Start receiving into ``tensor`` from ``src`` (None: from any rank of the group)."""
    return run(IRECV, group, False, tensor, src, group_src, tag)


def send(
    tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0, group_dst: int | None = None
) -> None:
    """Send ``tensor`` to ``dst``; returns once the data is handed to the transport."""
    run(SEND, group, False, tensor, dst, group_dst, tag)


def recv(
    tensor: Any, src: int | None = None, group: Any = None, tag: int = 0, group_src: int | None = None
) -> int:
    """Receive into ``tensor``; returns the sender's global rank (-1 on a non-member)."""
    return run(RECV, group, False, tensor, src, group_src, tag)


class P2POp:
    """One send or receive for ``batch_isend_irecv`` (torch.distributed.P2POp).

    ``op`` is ``accord.isend`` or ``accord.irecv``; the peer is ``peer`` (a global rank) or
    ``group_peer`` (a rank in ``group``). Checked when built, before anything moves.
    """

    def __init__(
        self,
        op: Callable[..., Any],
        tensor: Any,
        peer: int | None = None,
        group: Any = None,
        tag: int = 0,
        group_peer: int | None = None,
    ) -> None:
        if op is not isend and op is not irecv:
            raise ArgumentError(
                f"Invalid op: expected accord.isend or accord.irecv (the functions themselves), got {op!r}"
            )
        self.op, self.tensor, self.tag = op, tensor, tag
        pg = resolve_group(group, "P2POp")
        if pg is None:
            raise ArgumentError("P2POp: this rank is not a member of the given group")
        #: The device group (NCCL) carrying the tensor, or None: accord's own backend.
        self.device_group = device_group(pg, tensor) if pg.device_groups else None
        if self.device_group is None:
            as_buffer(tensor, writable=op is irecv)  # TypeError/ValueError now, not in the batch
        self.group = pg  # resolved, as torch's (None → the default group)
        self.group_peer = group_rank(pg, peer, group_peer, "peer")
        self.peer = pg.global_rank_of(self.group_peer)

    def __repr__(self) -> str:
        return f"P2POp({self.op.__name__}, peer={self.peer}, tag={self.tag})"


def batch_isend_irecv(p2p_op_list: list[P2POp]) -> list[Work]:
    """Post every send and receive of the list, then return their Works: nothing waits
    before everything is posted, so the order of the list (and a ring of batches on every
    rank) cannot deadlock. All ops must use the same group."""
    if not isinstance(p2p_op_list, list) or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ArgumentError("Invalid p2p_op_list: each op is expected to be an accord.P2POp")
    if not p2p_op_list:
        raise ShortListError("p2p_op_list is empty: pass at least one P2POp")
    group = p2p_op_list[0].group
    if any(p.group is not group for p in p2p_op_list):
        raise ArgumentError("All ops need to use the same group: batch_isend_irecv posts them on one group")
    return run(BATCH_ISEND_IRECV, group, False, p2p_op_list)


def _post_batch(pg: ProcessGroup, p2p_op_list: list[P2POp]) -> list[Work]:
    carriers = {id(p.device_group) for p in p2p_op_list}
    if len(carriers) > 1:
        raise ArgumentError(
            "batch_isend_irecv: the ops mix tensors of different devices (CPU and "
            "CUDA); put each device's ops in a batch of its own"
        )
    carrier = p2p_op_list[0].device_group
    if carrier is not None:
        return carrier.batch([(p.op is isend, p.tensor, p.group_peer, p.tag) for p in p2p_op_list])
    return [
        p2p.isend(pg, p.tensor, p.group_peer, p.tag)
        if p.op is isend
        else p2p.irecv(pg, p.tensor, p.group_peer, p.tag)
        for p in p2p_op_list
    ]


#: (the ops' device group, made when each P2POp was, carries the batch: no device step here;
#: the group is one this rank belongs to, as P2POp checked)
BATCH_ISEND_IRECV = Call("batch_isend_irecv", _post_batch, takes_async_op=False)


def send_object_list(
    object_list: list[Any],
    dst: int | None = None,
    group: Any = None,
    device: Any = None,
    group_dst: int | None = None,
    use_batch: bool = False,
) -> None:
    """Send the picklable objects of ``object_list`` to ``dst`` (in one message plus one per
    array inside; no size message first). ``device`` and ``use_batch`` change nothing here.
    The receiver unpickles: see ``accord.set_object_policy``."""
    run(SEND_OBJECT_LIST, group, False, object_list, dst, group_dst)


def recv_object_list(
    object_list: list[Any],
    src: int | None = None,
    group: Any = None,
    device: Any = None,
    group_src: int | None = None,
    use_batch: bool = False,
) -> int:
    """Receive objects into ``object_list`` (in place; the sender's list has the same length)
    from ``src``, or from any rank when both ``src`` and ``group_src`` are None. Returns the
    sender's global rank (-1 on a non-member).

    .. warning:: This unpickles what the sender sent, which can run arbitrary code: only
       receive from ranks you trust, or restrict it with ``accord.set_object_policy``.
    """
    return run(RECV_OBJECT_LIST, group, False, object_list, src, group_src)
