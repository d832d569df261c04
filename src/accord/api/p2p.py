"""The torch-compatible point-to-point functions: send, recv, isend, irecv, P2POp and
batch_isend_irecv, send_object_list and recv_object_list.

Owns: torch's signatures and return values (recv returns the sender's global rank; -1 on a
non-member). Ranks in signatures are global, as torch's.
"""

from __future__ import annotations

from typing import Any, Callable

from ..arrays import as_buffer
from ..errors import ArgumentError, ShortListError
from ..group import objects, p2p
from ..group.work import Work
from .common import device_group, group_rank, resolve_group


def check_not_self(pg: Any, rank: int, what: str) -> None:
    if rank == pg.rank():
        raise ArgumentError(f"{what} is this rank itself (group rank {rank}); a rank cannot send "
                            f"to or receive from itself")


def isend(tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Start sending ``tensor`` to ``dst``; the tensor must not change until the Work is done."""
    pg = resolve_group(group, "isend")
    if pg is None:
        return None
    try:
        peer = group_rank(pg, dst, group_dst, "dst")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            check_not_self(pg, peer, "dst")
            return dg.isend(tensor, peer, tag)  # type: ignore[no-any-return]
        return p2p.isend(pg, tensor, peer, tag)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def irecv(tensor: Any, src: int | None = None, group: Any = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Start receiving into ``tensor`` from ``src`` (None: from any rank of the group)."""
    pg = resolve_group(group, "irecv")
    if pg is None:
        return None
    try:
        source = None if src is None and group_src is None else group_rank(pg, src, group_src, "src")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.irecv(tensor, source, tag)  # type: ignore[no-any-return]
        return p2p.irecv(pg, tensor, source, tag)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def send(tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    """Send ``tensor`` to ``dst``; returns once the data is handed to the transport."""
    pg = resolve_group(group, "send")
    if pg is None:
        return
    try:
        peer = group_rank(pg, dst, group_dst, "dst")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            check_not_self(pg, peer, "dst")
            work = dg.isend(tensor, peer, tag)
            if work is not None:  # a torch backend may have waited itself (torch allows None)
                work.wait()
            return
        p2p.send(pg, tensor, peer, tag)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def recv(tensor: Any, src: int | None = None, group: Any = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into ``tensor``; returns the sender's global rank (-1 on a non-member)."""
    pg = resolve_group(group, "recv")
    if pg is None:
        return -1
    try:
        source = None if src is None and group_src is None else group_rank(pg, src, group_src, "src")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return pg.global_rank_of(dg.recv(tensor, source, tag))
        return pg.global_rank_of(p2p.recv(pg, tensor, source, tag))
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


class P2POp:
    """One send or receive for ``batch_isend_irecv`` (torch.distributed.P2POp).

    ``op`` is ``accord.isend`` or ``accord.irecv``; the peer is ``peer`` (a global rank) or
    ``group_peer`` (a rank in ``group``). Checked when built, before anything moves.
    """

    def __init__(self, op: Callable[..., Any], tensor: Any, peer: int | None = None, group: Any = None,
                 tag: int = 0, group_peer: int | None = None) -> None:
        if op is not isend and op is not irecv:
            raise ArgumentError("Invalid op: expected accord.isend or accord.irecv (the functions "
                                f"themselves), got {op!r}")
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
    pg = resolve_group(group, "batch_isend_irecv")
    if pg is None:
        return []
    try:
        carriers = {id(p.device_group) for p in p2p_op_list}
        if len(carriers) > 1:
            raise ArgumentError("batch_isend_irecv: the ops mix tensors of different devices (CPU and "
                                "CUDA); put each device's ops in a batch of its own")
        carrier = p2p_op_list[0].device_group
        if carrier is not None:
            return carrier.batch([(p.op is isend, p.tensor, p.group_peer, p.tag)  # type: ignore[no-any-return]
                                  for p in p2p_op_list])
        works = []
        for p in p2p_op_list:
            if p.op is isend:
                works.append(p2p.isend(pg, p.tensor, p.group_peer, p.tag))
            else:
                works.append(p2p.irecv(pg, p.tensor, p.group_peer, p.tag))
        return works
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def send_object_list(object_list: list[Any], dst: int | None = None, group: Any = None,
                     device: Any = None, group_dst: int | None = None, use_batch: bool = False) -> None:
    """Send the picklable objects of ``object_list`` to ``dst`` (in one message plus one per
    array inside; no size message first). ``device`` and ``use_batch`` change nothing here.
    The receiver unpickles: see ``accord.set_object_policy``."""
    pg = resolve_group(group, "send_object_list")
    if pg is None:
        return
    try:
        target = group_rank(pg, dst, group_dst, "dst")
        check_not_self(pg, target, "dst")
        objects.send_object_list(pg, object_list, target)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def recv_object_list(object_list: list[Any], src: int | None = None, group: Any = None,
                     device: Any = None, group_src: int | None = None, use_batch: bool = False) -> int:
    """Receive objects into ``object_list`` (in place; the sender's list has the same length)
    from ``src``, or from any rank when both ``src`` and ``group_src`` are None. Returns the
    sender's global rank (-1 on a non-member).

    .. warning:: This unpickles what the sender sent, which can run arbitrary code: only
       receive from ranks you trust, or restrict it with ``accord.set_object_policy``.
    """
    pg = resolve_group(group, "recv_object_list")
    if pg is None:
        return -1
    try:
        source = None
        if src is not None or group_src is not None:
            source = group_rank(pg, src, group_src, "src")
            check_not_self(pg, source, "src")
        return pg.global_rank_of(objects.recv_object_list(pg, object_list, source))
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise
