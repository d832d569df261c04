"""Shared memory for a group whose members share a host: setting it up, and ``CallSlots``.

Owns: the decision (every member on this host, shared memory supported and allowed), the
set-up handshake over the group's channel (create own segment → everyone reports → map the
others → everyone reports → unlink own), and ``CallSlots``, the ``Slots`` of one collective
call: rounds, ready/done words, and the fingerprint check (a per-round hash next to the data,
so a mismatch costs nothing when there is none). Must not know about env variables or the CLI.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config import Tunables
from ..errors import CollectiveMismatchError, DistError, PeerError
from ..timeouts import Deadline
from ..transport.mesh import Channel, Mesh
from ..transport.shm import (
    Segment,
    ShmDomain,
    segment_name,
    segment_size,
    shm_supported,
)
from ..transport.shm_exposed import cma_works, publish_self
from ..transport.shm_words import DETAIL_OFFSET, DONE, FP, READY, REDUCED, SEQ
from ..transport.wire import Fingerprint, FrameKind
from . import left_rounds
from .shm_liveness import checker

log = logging.getLogger("accord")
_SETUP_OP = 11  # the fingerprint op code of the set-up exchange (collectives.registry: shm_setup)


def eligible(mesh: Mesh, ranks: Sequence[int], tunables: Tunables) -> bool:
    if tunables.transport == "tcp" or len(ranks) < 2 or not mesh.shm_allowed or not shm_supported():
        return False
    host = mesh.host_ids[mesh.rank]
    return all(mesh.host_ids[r] == host for r in ranks)


def _exchange(
    channel: Channel, ranks: Sequence[int], me: int, step: int, status: int, deadline: Deadline, context: str
) -> list[int]:
    """Send ``status`` (one byte) to every member and collect theirs (over the channel)."""
    fp = Fingerprint(_SETUP_OP, 0, 0, 0, -1)
    outgoing = np.array([status], dtype=np.uint8)
    incoming = {r: np.zeros(1, dtype=np.uint8) for r in ranks if r != me}
    reqs: list[Any] = [
        channel.irecv(r, FrameKind.COLL, 0, step, 0, fp, buf.data, context) for r, buf in incoming.items()
    ]
    reqs += [channel.isend(r, FrameKind.COLL, 0, step, 0, fp, outgoing.data, context) for r in incoming]
    channel.wait(reqs, deadline, context)
    return [int(status if r == me else incoming[r][0]) for r in ranks]


def setup(
    mesh: Mesh,
    channel: Channel,
    ranks: Sequence[int],
    group_id: int,
    tunables: Tunables,
    deadline: Deadline,
    context: str,
) -> ShmDomain | None:
    """Map every member's segment, or return None (on every member) if any of them cannot.

    Single-copy reads (CMA) are enabled only if every member may read every other's memory.
    """
    me = mesh.rank
    size = segment_size(tunables.shm_slot_bytes)
    names = [segment_name(mesh.job_token, group_id, r, mesh.pids[r]) for r in ranks]
    segments: list[Segment | None] = [None] * len(ranks)
    index = ranks.index(me)
    try:
        segments[index] = segment = Segment(names[index], size, create=True)
        publish_self(segment)
    except OSError as exc:
        log.warning("%s: no shared memory (%s); this group uses TCP", context, exc)
    mine = segments[index]
    try:
        if min(_exchange(channel, ranks, me, 0, int(mine is not None), deadline, context)) == 0:
            _give_up(segments)
            return None
        status = _attach(segments, names, index, size, tunables, context)
        status = min(_exchange(channel, ranks, me, 1, status, deadline, context))
        if status == 0:
            _give_up(segments)
            return None
    finally:
        if mine is not None:
            mine.unlink()  # everyone has mapped it (or given up): the name is no longer needed
    domain = ShmDomain(
        index,
        [s for s in segments if s is not None],
        tunables.shm_slot_bytes,
        len(mesh.local_ranks()),
        checker(mesh, channel),
        threaded=mesh.threaded,
        names=ranks,
        spread=tunables.spread,
    )
    if status == 2:
        domain.enable_cma([mesh.pids[r] for r in ranks])
    return domain


def _attach(
    segments: list[Segment | None],
    names: Sequence[str],
    index: int,
    size: int,
    tunables: Tunables,
    context: str,
) -> int:
    """Map the others' segments: 0 failed, 1 mapped, 2 mapped and their memory readable (CMA)."""
    try:
        for i, name in enumerate(names):
            if i != index:
                segments[i] = Segment(name, size, create=False)
    except OSError as exc:
        log.warning("%s: cannot map a peer's shared memory (%s); this group uses TCP", context, exc)
        return 0
    if not tunables.cma:
        return 1
    readable = all(cma_works(s) for i, s in enumerate(segments) if i != index and s is not None)
    return 2 if readable else 1


def _give_up(segments: Sequence[Segment | None]) -> None:
    for segment in segments:
        if segment is not None:
            segment.mmap.close()
    return None


TAIL = struct.Struct("<7q")  # the fingerprint after the call number, padded to 8 words
#: A round's hash is hash(fingerprint) ^ (call number · SEQ_MIX & HASH_MASK) on every rank
#: (CallSlots.reset, and one_round's compiled calls: the two must agree word for word).
SEQ_MIX, HASH_MASK = 0x9E3779B97F4A7C15, 0x7FFFFFFFFFFFFFFF


class CallSlots:
    """The ``Slots`` of a collective call on a shared-memory group.

    One object per group is reused from call to call (``reset``): calls on a group run one
    at a time, and building it anew costs more than a small collective's copies. The
    deadline is made only if a wait has to slow down. ``domain``, ``others`` (the other
    ranks) and ``posted_tails`` (the detail words now in each parity's slot) are shared
    with the compiled calls of ``one_round``, which run the same rounds.
    """

    __slots__ = (
        "rank",
        "size",
        "slot_bytes",
        "tunables",
        "domain",
        "_hash",
        "_seq",
        "_fp",
        "_tail",
        "_name",
        "others",
        "_describe",
        "_context",
        "_scratch",
        "_expires",
        "_budget",
        "_deadline",
        "_known",
        "_last_views",
        "posted_tails",
        "_last_known",
        "closed",
        "left",
    )

    def __init__(
        self,
        domain: ShmDomain,
        tunables: Tunables,
        describe: Callable[[Fingerprint, int], str],
        scratch: Callable[..., np.ndarray],
        context: Callable[[str, int], str],
    ) -> None:
        self.rank, self.size, self.slot_bytes = domain.rank, domain.size, domain.slot_bytes
        self.tunables, self.domain = tunables, domain
        self.others = [r for r in range(domain.size) if r != domain.rank]
        self._describe, self._scratch, self._context = describe, scratch, context
        self._known: dict[Fingerprint, tuple[int, bytes]] = {}  # fingerprint → (hash, detail words)
        self._fp = Fingerprint()
        self._seq, self._hash, self._tail, self._name = 0, 0, b"", ""
        self._expires, self._budget = 0.0, 0.0
        self._deadline: Deadline | None = None
        self._last_views: tuple[Any, ...] = (-1, None, [], [])
        self.posted_tails: list[bytes | None] = [None, None]  # detail words now in each parity
        self._last_known: tuple[Any, ...] = (None, (0, b""))  # (fingerprint, its known entry)
        self.closed = False  # the group shut down: no call may use the slots
        #: the round a root left unchecked (``leave``): (round, hash, fingerprint, call number)
        self.left: tuple[int, int, Fingerprint, int] | None = None

    def reset(self, name: str, seq: int, fp: Fingerprint, expires: float, budget: float) -> CallSlots:
        """Bind this object to call ``seq`` (named ``name``) with fingerprint ``fp``."""
        last = self._last_known
        if last[0] is fp:  # the same plan as the last call: no hashing
            known = last[1]
        else:
            known = self._known.get(fp)
            if known is None:
                if len(self._known) > 256:
                    self._known.clear()
                known = self._known[fp] = (hash(fp), TAIL.pack(*fp, 0, 0))
            self._last_known = (fp, known)
        # every rank of the call computes the same hash: fingerprint and call number agree
        self._hash = known[0] ^ (seq * SEQ_MIX & HASH_MASK)
        self._tail, self._seq, self._fp, self._name = known[1], seq, fp, name
        self._expires, self._budget, self._deadline = expires, budget, None
        return self

    @property
    def deadline(self) -> Deadline:
        if self._deadline is None:
            self._deadline = Deadline(self._expires, self._budget)
        return self._deadline

    def __str__(self) -> str:
        return self._context(self._name, self._seq)

    def close(self) -> None:
        """Drop the cached views of the slots (the group is shutting down); a round left
        unchecked is checked without waiting (``left_rounds.check_at_close``)."""
        self.closed = True
        self._last_views = (-1, None, [], [])
        if self.left is not None:
            left_rounds.check_at_close(self)

    # The methods below reach into the domain's words directly (one call each, not two):
    # they run a few times per collective and are most of a small collective's cost.
    def begin(self) -> int:
        if self.left is not None:
            left_rounds.settle(self)
        domain = self.domain
        k = domain.round + 1
        domain.round = k
        if k > 2:
            words = domain.words
            for r in self.others:
                if words[r][DONE] < k - 2:
                    if not domain.quick_wait(DONE, k - 2, self.others):
                        domain.wait_slow(DONE, k - 2, self.others, self.deadline, self)
                    break
        parity = k & 1
        mine = domain.mine
        tail = self._tail
        if self.posted_tails[parity] is not tail:  # the detail words, only when they change
            base = DETAIL_OFFSET[parity]
            domain.mine_bytes[base + 8 : base + 64] = tail
            self.posted_tails[parity] = tail
        mine[SEQ + parity] = self._seq
        mine[FP + parity] = self._hash  # READY's line: published with it by ready()
        return k

    def slot(self, rank: int, round_: int) -> np.ndarray:
        return self.domain.slot(rank, round_)

    def views(self, round_: int, nbytes: int, dtype: np.dtype) -> list[np.ndarray]:
        last = self._last_views
        if last[0] == nbytes and last[1] is dtype:  # the same shape as the last call: common
            return last[2 + (round_ & 1)]  # type: ignore[no-any-return]  # (a tuple indexed by round parity)
        both = (self.domain.views(0, nbytes, dtype), self.domain.views(1, nbytes, dtype))
        self._last_views = (nbytes, dtype, *both)
        return both[round_ & 1]

    def ready(self, round_: int) -> None:
        self.domain.mine[READY] = round_

    def wait_ready(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        ranks = self.others if ranks is None else ranks
        words, fp, mine = self.domain.words, FP + (round_ & 1), self._hash
        for r in ranks:
            if words[r][READY] < round_:
                if not self.domain.quick_wait(READY, round_, ranks):
                    self.domain.wait_slow(READY, round_, ranks, self.deadline, self)
                break
        for r in ranks:
            if words[r][fp] != mine:
                raise self.mismatch(r, self.domain.fingerprint(r, round_))

    def reduced(self, round_: int) -> None:
        self.domain.mine[REDUCED] = round_

    def wait_reduced(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        self.domain.wait(REDUCED, round_, self.others if ranks is None else ranks, self)

    def done(self, round_: int) -> None:
        self.domain.mine[DONE] = round_

    def leave(self, round_: int) -> None:
        self.left = (round_, self._hash, self._fp, self._seq)

    def describe(self, fp: Fingerprint, seq: int) -> str:
        return self._describe(fp, seq)

    def wait_done(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        self.domain.wait(DONE, round_, self.others if ranks is None else ranks, self)

    @property
    def can_fetch(self) -> bool:
        return self.domain.cma is not None

    def expose(self, round_: int, array: np.ndarray) -> None:
        self.domain.expose(round_, array)

    def fetch(self, rank: int, round_: int, offset: int, dst: np.ndarray) -> None:
        try:
            self.domain.fetch(rank, round_, offset, dst)
        except PeerError as exc:
            raise self._copy_failed(rank, exc, "reading", round_) from exc

    def put(self, rank: int, round_: int, offset: int, src: np.ndarray) -> None:
        try:
            self.domain.put(rank, round_, offset, src)
        except PeerError as exc:
            raise self._copy_failed(rank, exc, "writing", round_) from exc

    def quiesce(self, round_: int) -> None:
        self.domain.quiesce(round_)

    def expose_blocks(self, round_: int, blocks: Sequence[np.ndarray]) -> None:
        self.domain.expose_blocks(round_, blocks)

    def fetch_block(
        self, rank: int, round_: int, index: int, dst: np.ndarray, offset: int = 0, whole: int | None = None
    ) -> None:
        """Read ``rank``'s block ``index`` (or ``dst.nbytes`` of it from byte ``offset``, a
        block this rank expects to be ``whole`` bytes); a block of another size means the
        ranks disagree on the call: CollectiveMismatchError, never a short or long read."""
        size = self.domain.block_size(rank, round_, index)
        expected = dst.nbytes if whole is None else whole
        if size != expected or offset + dst.nbytes > size:
            raise CollectiveMismatchError(
                f"{self}: rank {self.domain.names[rank]} has {size} bytes for this rank, "
                f"which expects {expected}. Do the sizes (split sizes) agree across ranks?"
            )
        try:
            self.domain.fetch_block(rank, round_, index, dst, offset)
        except PeerError as exc:
            raise self._copy_failed(rank, exc, "reading") from exc

    def _copy_failed(self, rank: int, exc: PeerError, doing: str, round_: int | None = None) -> Exception:
        """A single-copy read or write of ``rank``'s buffer of ``round_`` failed: what failed
        ``rank``'s call if it took the buffer back first, else the call and the rank named
        (ESRCH: its process is gone)."""
        if round_ is not None and self.domain.withdrawn(rank, round_):
            return self.domain.left(rank, self)
        name = self.domain.names[rank]
        if "ESRCH" in str(exc):
            return PeerError(
                f"{self}: rank {name} is gone: its process no longer exists (it died "
                f"while this rank was {doing} its buffer)",
                peer=name,
            )
        return PeerError(f"{self}: {doing} rank {name}'s buffer failed: {exc}", peer=name)

    def scratch(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray:
        return self._scratch(count, dtype, which)

    def mismatch(
        self, rank: int, detail: list[int], fp: Fingerprint | None = None, seq: int | None = None
    ) -> DistError:
        """``rank`` called another call (its ``detail`` words) than this one (or than call
        ``seq`` with ``fp``: a round a root left unchecked, found at this rank's next call)."""
        their_seq, op, algo, dtype, count, root = detail[:6]
        theirs = self._describe(Fingerprint(op, algo, dtype, count, root), their_seq)
        mine = self._describe(self._fp if fp is None else fp, self._seq if seq is None else seq)
        return CollectiveMismatchError(
            f"{self}: rank {self.domain.names[rank]} called {theirs}, this rank called {mine}. "
            f"Every rank must call the same collectives, in the same order, with matching dtypes, "
            f"sizes and roots"
        )
