"""Object collectives and object point-to-point on a ProcessGroup, in one round each.

Owns: broadcast_object_list, all_gather_object, gather_object, scatter_object_list,
send_object_list and recv_object_list: who sends which object's frames (``pickling``) to
whom, and writing the results into the caller's lists in place. Receivers do not know sizes
in advance and need not: they post receives of any size, so there is no size-exchange round
and no 2 GiB limit. Unpickling happens after the exchange, so an object the group's
``ObjectPolicy`` refuses raises on that rank only and leaves the group usable. Ranks here
are group ranks. Must not know about the default world or env variables.

Security: these functions unpickle what peers send, which can run arbitrary code; see
``pickling`` and ``ProcessGroup.object_policy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import profiling
from ..arrays import DTYPE_CODES
from ..collectives.algorithm import COLLECTIVES
from ..errors import ArgumentError, ArgumentTypeError, DistTimeoutError, ShortListError
from ..timeouts import Deadline
from ..transport.wire import Fingerprint, FrameKind
from . import pickling
from .call import OBJECT_CALLS
from .dispatch import check_group_rank
from .process_group import ProcessGroup

_BYTES = DTYPE_CODES["bytes"]
_CODE = {name: code for code, name in OBJECT_CALLS.items()}  # fingerprint algo: which call


def broadcast_object_list(group: ProcessGroup, object_list: list[Any], src: int) -> None:
    """Every rank's ``object_list`` gets the objects of ``src``'s (same length everywhere)."""
    check_group_rank(group, src, "src")
    _check_list(object_list, "object_list")
    me, frames = group.rank(), None
    if me == src:
        frames = pickling.dumps(list(object_list))
    got = _exchange(
        group,
        "broadcast_object_list",
        len(object_list),
        src,
        {r: frames for r in range(group.size()) if r != src} if me == src else {},
        [src] if me != src else [],
    )
    if me != src:
        object_list[:] = pickling.loads(got[src], group.object_policy)


def all_gather_object(group: ProcessGroup, object_list: list[Any], obj: Any) -> None:
    """``object_list[i]`` gets (a copy of) rank i's ``obj`` (slots beyond the group's size
    are left as they were, as torch leaves them)."""
    _check_list(object_list, "object_list", group.size())
    me, frames = group.rank(), pickling.dumps(obj)
    others = [r for r in range(group.size()) if r != me]
    got = _exchange(group, "all_gather_object", 0, -1, dict.fromkeys(others, frames), others)
    got[me] = pickling.copy_frames(frames)
    _fill(object_list, got, group.object_policy)


def gather_object(group: ProcessGroup, obj: Any, object_gather_list: list[Any] | None, dst: int) -> None:
    """On ``dst``, ``object_gather_list[i]`` gets rank i's ``obj`` (slots beyond the group's
    size are left as they were); it must be None elsewhere."""
    check_group_rank(group, dst, "dst")
    me = group.rank()
    if me == dst:
        if object_gather_list is None:
            raise ArgumentError(
                f"Argument object_gather_list must be specified on the destination "
                f"rank (dst {dst}): pass a list of {group.size()} slots"
            )
        _check_list(object_gather_list, "object_gather_list", group.size())
    elif object_gather_list is not None:
        raise ArgumentError(
            f"Argument object_gather_list must NOT be specified on non-destination "
            f"ranks: this is group rank {me} and dst is {dst}; pass None here"
        )
    frames = pickling.dumps(obj)
    sends = {} if me == dst else {dst: frames}
    others = [r for r in range(group.size()) if r != me] if me == dst else []
    got = _exchange(group, "gather_object", 0, dst, sends, others)
    if me == dst:
        assert object_gather_list is not None
        got[me] = pickling.copy_frames(frames)
        _fill(object_gather_list, got, group.object_policy)


def scatter_object_list(
    group: ProcessGroup, output_list: list[Any], input_list: list[Any] | None, src: int
) -> None:
    """``output_list[0]`` on rank i gets ``input_list[i]`` of ``src``."""
    check_group_rank(group, src, "src")
    if not isinstance(output_list, list) or len(output_list) < 1:
        raise ArgumentError(
            "Expected argument scatter_object_output_list to be a list of size at "
            f"least 1, got {output_list!r}"
        )
    me, n = group.rank(), group.size()
    sends: dict[int, list[memoryview]] = {}
    if me == src:
        if input_list is None:
            raise ArgumentError(
                f"source rank must provide non-None scatter_object_input_list "
                f"(src {src}): a list of {n} objects, one per rank"
            )
        _check_list(input_list, "scatter_object_input_list", n, exact=True)
        sends = {r: pickling.dumps(input_list[r]) for r in range(n)}
    mine = sends.pop(me, None)
    got = _exchange(group, "scatter_object_list", 0, src, sends, [src] if me != src else [])
    frames = pickling.copy_frames(mine) if mine is not None else got[src]
    output_list[0] = pickling.loads(frames, group.object_policy)


def _check_list(objects: Any, what: str, size: int | None = None, exact: bool = False) -> None:
    """``objects`` is a list with a slot per rank (``size``): at least that many, or exactly
    as many with ``exact``. Longer output lists are torch's rule too: the first slots are
    filled, the others left as they were."""
    if not isinstance(objects, list):
        raise ArgumentTypeError(
            f"{what} must be a list, got {type(objects).__name__} (it is filled in place)"
        )
    if size is None or len(objects) == size:
        return
    if len(objects) < size:
        raise ShortListError(
            f"{what} has {len(objects)} slots, but the group has {size} ranks: "
            f"pass a list with one slot per rank, e.g. [None] * {size}"
        )
    if exact:
        raise ArgumentError(
            f"{what} has {len(objects)} objects, but the group has {size} ranks: "
            f"pass exactly one object per rank"
        )


def _fill(object_list: list[Any], got: dict[int, list[Any]], policy: Any) -> None:
    """Unpickle every rank's object first, then write them all (all or nothing) into the
    first slots; slots beyond the group's size keep what they held."""
    objects = [pickling.loads(got[r], policy) for r in range(len(got))]
    object_list[: len(objects)] = objects


def _exchange(
    group: ProcessGroup,
    op: str,
    count: int,
    root: int,
    sends: Mapping[int, list[memoryview] | None],
    sources: list[int],
) -> dict[int, list[Any]]:
    """One collective call: send each destination its object's frames, receive one object
    from each source (frames of any size), return {source: frames}."""
    fp = Fingerprint(COLLECTIVES["object"], _CODE[op], _BYTES, count, root)
    got: dict[int, list[Any]] = {}

    def body(peers: Any) -> None:
        heads = {r: peers.irecv_any(r, 0) for r in sources}
        posted = [
            peers.isend(r, _array(f), step)
            for r, frames in sends.items()
            if frames
            for step, f in enumerate(frames)
        ]
        peers.wait(*heads.values())
        rest = {
            r: [peers.irecv_any(r, 1 + i) for i in range(pickling.buffer_count(h.buf))]
            for r, h in heads.items()
        }
        peers.wait(*(h for hs in rest.values() for h in hs), *posted)
        for r, head in heads.items():
            got[r] = [head.buf, *(h.buf for h in rest[r])]

    group.engine.run_collective(op, fp, body, [], [], False)
    return got


def _array(frame: memoryview) -> np.ndarray:
    return np.frombuffer(frame, dtype=np.uint8)


# -- point to point --------------------------------------------------------------------------


def send_object_list(group: ProcessGroup, object_list: list[Any], dst: int) -> None:
    """Send the objects of ``object_list`` to ``dst`` (blocking until handed to the transport)."""
    _check_list(object_list, "object_list")
    event = profiling.begin_if_recording("send_object_list")
    try:
        _send_objects(group, object_list, dst)
    finally:
        if event is not None:
            profiling.end(event)


def _send_objects(group: ProcessGroup, object_list: list[Any], dst: int) -> None:
    if group.engine.p2p is not None:
        group.engine.p2p.send_frames(pickling.dumps(list(object_list)), dst, "send_object_list")
        return
    channel = group.planner.channel
    context = f"send_object_list to rank {group.global_rank_of(dst)} on rank {group.global_rank}"
    fp = Fingerprint(0, 0, _BYTES, len(object_list), -1)
    frames = pickling.dumps(list(object_list))
    reqs = [channel.isend(group.global_rank_of(dst), FrameKind.P2P, 0, 0, 0, fp, f, context) for f in frames]
    channel.wait(reqs, Deadline.after(group.calls.timeout), context)


def recv_object_list(group: ProcessGroup, object_list: list[Any], src: int | None) -> int:
    """Receive objects into ``object_list`` (same length as the sender's); returns the
    sender's group rank."""
    _check_list(object_list, "object_list")
    event = profiling.begin_if_recording("recv_object_list")
    try:
        return _recv_objects(group, object_list, src)
    finally:
        if event is not None:
            profiling.end(event)


def _recv_objects(group: ProcessGroup, object_list: list[Any], src: int | None) -> int:
    if group.engine.p2p is not None:
        frames, sender = group.engine.p2p.recv_frames(src, "recv_object_list")
        return _fill_received(
            group, object_list, frames, sender, f"recv_object_list on rank {group.global_rank}"
        )
    channel, deadline = group.planner.channel, Deadline.after(group.calls.timeout)
    source = None if src is None else group.global_rank_of(src)
    context = (
        f"recv_object_list from {'any rank' if source is None else f'rank {source}'} "
        f"on rank {group.global_rank}"
    )
    expect = Fingerprint(0, 0, _BYTES, 0, -1)
    head = channel.irecv(source, FrameKind.P2P, 0, 0, 0, expect, None, context)
    _wait_recv(group, head, deadline, context)
    assert head.source is not None and head.buf is not None
    rest = [
        channel.irecv(head.source, FrameKind.P2P, 0, 0, 0, expect, None, context)
        for _ in range(pickling.buffer_count(head.buf))
    ]
    for req in rest:
        _wait_recv(group, req, deadline, context)
    return _fill_received(
        group, object_list, [head.buf, *(r.buf for r in rest)], group.group_rank_of(head.source), context
    )


def _fill_received(
    group: ProcessGroup, object_list: list[Any], frames: list[Any], sender: int, context: str
) -> int:
    """Unpickle the frames group rank ``sender`` sent into ``object_list``; returns ``sender``."""
    objects = pickling.loads(frames, group.object_policy)
    if len(objects) != len(object_list):
        raise ArgumentError(
            f"{context}: rank {group.global_rank_of(sender)} sent {len(objects)} "
            f"objects, but object_list has {len(object_list)} slots; pass a list "
            f"of the sender's length"
        )
    object_list[:] = objects
    return sender


def _wait_recv(group: ProcessGroup, req: Any, deadline: Deadline, context: str) -> None:
    try:
        group.planner.channel.wait([req], deadline, context)
    except DistTimeoutError as exc:
        if not group.planner.channel.cancel(req) and req.claimed:
            group.calls.break_group(context, exc)
        raise
