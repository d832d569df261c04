"""Byte rings in shared memory: the data path of point-to-point links between ranks of a host.

Owns: the ring layout, ``RingWriter``/``RingReader`` (non-blocking, socket-like: ``sendmsg``,
``send`` and ``recv_into`` that raise BlockingIOError when full/empty), and ``map_rings``, the
set-up through the store (each rank creates one segment holding a ring towards each local
peer; peers map it; names are unlinked once everyone mapped them). Must not know about frames
or matching: the mesh reads frames from a ring exactly as from a socket.

A ring for the directed pair (writer → reader) lives in the writer's segment::

    [head (written by the writer)] [tail (written by the reader)] — one cache line each
    [capacity bytes of data]

Bytes are written before ``head`` moves and read before ``tail`` moves; on x86-64 (TSO) a
reader that sees the new head sees the bytes (see ``shm.py``). Counters are never reset.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from ..errors import DistStoreError
from ..store.base import Store
from ..timeouts import Deadline
from .shm import Segment, shm_supported

log = logging.getLogger("accord")
_HEADS = 128  # bytes of control per ring (head and tail on separate cache lines)


class RingWriter:
    """The sending end of one ring."""

    def __init__(self, buffer: memoryview, capacity: int) -> None:
        self._words = buffer[:8].cast("q")
        self._tail_words = buffer[64:72].cast("q")
        self._data = buffer[_HEADS : _HEADS + capacity]
        self._capacity = capacity

    def _put(self, chunk: memoryview, head: int, room: int) -> int:
        n = min(chunk.nbytes, room)
        at = head % self._capacity
        first = min(n, self._capacity - at)
        self._data[at : at + first] = chunk[:first]
        if n > first:
            self._data[: n - first] = chunk[first:n]
        return n

    def sendmsg(self, buffers: Sequence[memoryview]) -> int:
        head = self._words[0]
        room = self._capacity - (head - self._tail_words[0])
        if room <= 0:
            raise BlockingIOError
        written = 0
        for view in buffers:  # byte memoryviews (format "B")
            n = self._put(view, head + written, room - written)
            written += n
            if n < view.nbytes:
                break
        self._words[0] = head + written  # publish after the bytes (TSO)
        return written

    def send(self, buf: memoryview) -> int:
        return self.sendmsg([buf])

    def release(self) -> None:
        _release(self._words, self._tail_words, self._data)


class RingReader:
    """The receiving end of one ring (in the peer's segment)."""

    def __init__(self, buffer: memoryview, capacity: int) -> None:
        self._head_words = buffer[:8].cast("q")
        self._tail_words = buffer[64:72].cast("q")
        self._data = buffer[_HEADS : _HEADS + capacity]
        self._capacity = capacity

    def readable(self) -> bool:
        return self._head_words[0] != self._tail_words[0]

    def recv_into(self, target: memoryview) -> int:
        tail = self._tail_words[0]
        avail = self._head_words[0] - tail
        if avail <= 0:
            raise BlockingIOError
        n = min(avail, target.nbytes)
        at = tail % self._capacity
        first = min(n, self._capacity - at)
        target[:first] = self._data[at : at + first]
        if n > first:
            target[first:n] = self._data[: n - first]
        self._tail_words[0] = tail + n
        return n

    def release(self) -> None:
        _release(self._head_words, self._tail_words, self._data)


def _release(*views: memoryview) -> None:
    """Let go of a ring's views of its segment at once (the mesh is closed), so the mapping
    goes now, not when the collector breaks the mesh's reference cycles."""
    for view in views:
        try:
            view.release()
        except BufferError:  # a view of it is still in use: it goes with that one
            pass


def _layout(peers: Sequence[int], capacity: int) -> dict[int, int]:
    """Offset of the ring towards each peer in a segment."""
    return {peer: i * (_HEADS + capacity) for i, peer in enumerate(peers)}


def map_rings(
    store: Store,
    prefix: str,
    rank: int,
    local: Sequence[int],
    pids: Sequence[int],
    token: str,
    capacity: int,
    deadline: Deadline,
) -> dict[int, tuple[RingWriter, RingReader]]:
    """Set up rings with every other rank of ``local`` (this host); {} if shared memory is
    unavailable. A pair uses rings only if both ranks mapped each other's segment."""
    others = [r for r in local if r != rank]
    if not others or not shm_supported():
        return {}
    size = len(local) * (_HEADS + capacity)
    name = f"accord-{token}-rings-r{rank}-p{pids[rank]}"
    segments: dict[int, Segment] = {}
    try:
        segments[rank] = Segment(name, size, create=True)
    except OSError as exc:
        log.warning("rank %d: no shared memory for point-to-point rings (%s); using TCP", rank, exc)
    try:
        store.set(f"{prefix}/rings/{rank}", b"1" if segments else b"0")
        created = _gather(store, f"{prefix}/rings", others, deadline)
        for peer in others:
            if created[peer] == b"1" and rank in segments:
                try:
                    segments[peer] = Segment(
                        f"accord-{token}-rings-r{peer}-p{pids[peer]}", size, create=False
                    )
                except OSError as exc:
                    log.warning("rank %d: cannot map rank %d's rings (%s); using TCP", rank, peer, exc)
        store.set(f"{prefix}/rings-mapped/{rank}", ",".join(map(str, segments)).encode())
        mapped = _gather(store, f"{prefix}/rings-mapped", others, deadline)
    finally:
        if rank in segments:
            segments[rank].unlink()
    return _pairs(rank, local, segments, mapped, capacity)


def _gather(store: Store, key: str, ranks: Sequence[int], deadline: Deadline) -> dict[int, bytes]:
    keys = [f"{key}/{r}" for r in ranks]
    try:
        store.wait(keys, timedelta(seconds=max(deadline.remaining(), 0.001)))
    except DistStoreError:
        return dict.fromkeys(ranks, b"")
    return dict(zip(ranks, store.multi_get(keys)))


def _pairs(
    rank: int, local: Sequence[int], segments: dict[int, Segment], mapped: dict[int, bytes], capacity: int
) -> dict[int, tuple[RingWriter, RingReader]]:
    offsets = _layout(local, capacity)
    links = {}
    for peer, theirs in mapped.items():
        if peer not in segments or rank not in segments:
            continue
        if str(rank) not in theirs.decode().split(","):
            continue
        mine = memoryview(segments[rank].mmap)
        peer_view = memoryview(segments[peer].mmap)
        writer = RingWriter(mine[offsets[peer] :], capacity)
        reader = RingReader(peer_view[offsets[rank] :], capacity)
        links[peer] = (writer, reader)
    return links
