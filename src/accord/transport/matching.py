"""Requests and the matching of arriving frames to posted receives.

Owns: ``SendRequest``, ``RecvRequest``, ``Parked`` (a frame that arrived before its receive
was posted), the ``Matcher`` tables, and the checks that turn a disagreement between sender
and receiver (size, fingerprint) into an error instead of wrong data. Must not know about
sockets, shared memory, threads or algorithms; every Matcher method is called with the mesh's
lock held.

Matching rules (MPI's non-overtaking order):

- collective frames match on (group, seq, step) from one named source;
- p2p frames match on (group, tag) from one source or from any source (``src=None``); among
  frames that could match, the earliest arrival wins; among receives, the earliest posted.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable
from typing import Any

from ..arrays import DTYPE_NAMES
from ..errors import CollectiveMismatchError
from .wire import Fingerprint, FrameKind, Header

ANY_SOURCE = None


def match_key(kind: int, group: int, seq: int, step: int, tag: int) -> Hashable:
    if kind == FrameKind.COLL:
        return (group, seq, step)
    return (group, "p2p", tag)


class SendRequest:
    """One frame on its way to one peer."""

    __slots__ = ("dst", "header", "payload", "offset", "done", "error", "channel", "context")

    def __init__(self, dst: int, header: bytes, payload: memoryview, channel: Any, context: Any) -> None:
        self.dst = dst
        self.header = header
        self.payload = payload
        self.offset = 0  # bytes of header + payload written so far (stream transports)
        self.done = False
        self.error: BaseException | None = None
        self.channel = channel
        self.context = context

    @property
    def total(self) -> int:
        return len(self.header) + self.payload.nbytes


class RecvRequest:
    """A posted receive: where a matching frame's payload goes, and what it must look like.

    ``buf`` None receives a message of any size: a buffer of the announced size is made (or
    the parked one handed over) and left in ``buf`` once done.
    """

    __slots__ = (
        "src",
        "kind",
        "key",
        "buf",
        "expect",
        "channel",
        "context",
        "done",
        "error",
        "source",
        "order",
        "claimed",
    )

    def __init__(
        self,
        src: int | None,
        kind: int,
        key: Hashable,
        buf: memoryview | None,
        expect: Fingerprint | None,
        channel: Any,
        context: Any,
        order: int,
    ) -> None:
        self.src = src
        self.kind = kind
        self.key = key
        self.buf = buf
        self.expect = expect
        self.channel = channel
        self.context = context
        self.done = False
        self.error: BaseException | None = None
        self.source: int | None = None  # the sender, once matched
        self.order = order
        self.claimed = False  # matched to a frame whose payload is still arriving


class Parked:
    """A frame that arrived before a receive for it was posted; its payload is kept here."""

    __slots__ = ("src", "header", "data", "complete", "claimed_by")

    def __init__(self, src: int, header: Header, data: bytearray, complete: bool) -> None:
        self.src = src
        self.header = header
        self.data = data
        self.complete = complete
        self.claimed_by: RecvRequest | None = None


def mismatch_error(
    context: Any, src: int, theirs: Fingerprint, ours: Fingerprint, seq: int, describe: Any
) -> CollectiveMismatchError:
    return CollectiveMismatchError(
        f"{context}: rank {src} called {describe(theirs, seq)}, this rank called "
        f"{describe(ours, seq)}. Every rank must call the same collectives, in the same order, "
        f"with matching dtypes, sizes and roots"
    )


def frame_error(req: RecvRequest, src: int, header: Header, describe: Any) -> BaseException | None:
    """The error to raise if this frame must not be delivered into this receive, else None."""
    expected = header.nbytes if req.buf is None else req.buf.nbytes
    if req.kind == FrameKind.COLL and req.expect is not None and header.fingerprint != req.expect:
        return mismatch_error(req.context, src, header.fingerprint, req.expect, header.seq, describe)
    if req.kind == FrameKind.P2P and req.expect is not None and header.fingerprint.dtype != req.expect.dtype:
        return CollectiveMismatchError(
            f"{req.context}: rank {src} sent {DTYPE_NAMES.get(header.fingerprint.dtype, '?')} "
            f"elements, but this rank receives into a {DTYPE_NAMES.get(req.expect.dtype, '?')} "
            f"tensor. Send and receive tensors of the same dtype"
        )
    if header.nbytes != expected:
        what = "message" if req.kind == FrameKind.P2P else f"message {header.step}"
        return CollectiveMismatchError(
            f"{req.context}: rank {src} sent a {header.nbytes}-byte {what}, but this rank's "
            f"buffer holds {expected} bytes. Do sender and receiver use tensors of the same "
            f"size and dtype?"
        )
    return None


class Matcher:
    """Posted receives and parked frames, keyed by match key; FIFO within a key."""

    def __init__(self) -> None:
        self.posted: dict[Hashable, deque[RecvRequest]] = {}
        self.parked: dict[Hashable, deque[Parked]] = {}
        self._order = itertools.count()

    def next_order(self) -> int:
        return next(self._order)

    def take_parked(self, req: RecvRequest) -> Parked | None:
        """The parked frame this new receive matches (removed from the table), if any."""
        queue = self.parked.get(req.key)
        if not queue:
            return None
        for i, entry in enumerate(queue):
            if req.src is None or entry.src == req.src:
                del queue[i]
                if not queue:
                    del self.parked[req.key]
                return entry
        return None

    def post(self, req: RecvRequest) -> None:
        self.posted.setdefault(req.key, deque()).append(req)

    def take_posted(self, src: int, key: Hashable) -> RecvRequest | None:
        """The earliest posted receive that a frame from ``src`` with ``key`` matches."""
        queue = self.posted.get(key)
        if not queue:
            return None
        for i, req in enumerate(queue):
            if req.src is None or req.src == src:
                del queue[i]
                if not queue:
                    del self.posted[key]
                return req
        return None

    def park(self, entry: Parked) -> None:
        key = match_key(
            entry.header.kind, entry.header.group, entry.header.seq, entry.header.step, entry.header.tag
        )
        self.parked.setdefault(key, deque()).append(entry)

    def cancel(self, req: RecvRequest) -> bool:
        """Withdraw a posted receive that nothing matched yet; False if it is already claimed."""
        queue = self.posted.get(req.key)
        if queue is not None and req in queue:
            queue.remove(req)
            if not queue:
                del self.posted[req.key]
            return True
        return False

    def parked_collective(self, group: int, upto: int) -> list[Parked]:
        """Parked frames of collective calls numbered ``upto`` or lower of ``group``."""
        if not self.parked:
            return []
        return [
            entry
            for key, queue in self.parked.items()
            if key[0] == group and key[1] != "p2p" and key[1] <= upto  # type: ignore[index]  # (group, seq, ...)
            for entry in queue
        ]

    def posted_requests(self) -> list[RecvRequest]:
        return [req for queue in self.posted.values() for req in queue]
