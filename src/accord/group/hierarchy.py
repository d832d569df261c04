"""Two-level collectives for a group whose members span hosts: shared memory inside each host,
the network only between hosts.

Owns: ``Hierarchy.of`` (the layout, from the mesh's host identities: the group's hosts in the
order of their first member, and for each the members in group-rank order; a group qualifies
with two hosts or more and the same number, two or more, of members on each), the two inner
groups made on first use by every member — ``local`` (this host's members) and ``cross`` (the
members of this rank's local index on every host, one per host) — and the algorithms made of
calls on them (L members per host, H hosts, S the message):

  all_reduce      local reduce_scatter into L slices; cross all_reduce of this rank's slice
                  (H ranks, S/L each: every local rank uses its own connections); local
                  all_gather of the slices. In pieces (``pipeline_bytes``, at most 32):
                  piece i's cross all_reduce runs (async) while piece i+1 is reduced and
                  piece i-1 gathered inside the host, so the network is busy while memory
                  works. Auto, measured: the first PROBE_CALLS all_reduces of PROBE_BYTES
                  or more run in one piece, each stage timed from a barrier; then the
                  members pipeline if the network stage took NETWORK_BOUND times the two
                  stages inside the host or longer (FEW_CORES_BOUND where a host has
                  fewer than two cores per local rank: the stages then share cores), in
                  pieces that each take about PIECE_SECONDS on the network. Each
                  member's quickest times over the calls, then the host stages' quickest
                  and the network stage's slowest over the members decide (one member
                  descheduled inflates its own times only), so all decide alike.
                  Fewer elements than L: local reduce to index 0, cross all_reduce among
                  the indexes 0, local broadcast.
  broadcast       cross broadcast among the root's local index, then local broadcast from it;
                  in the all_reduce's pieces once it decided to pipeline (a slow network):
                  piece i crosses (async) while piece i-1 is broadcast inside the host.
  all_gather      cross all_gather among each local index, then one local all_gather per host.
  reduce_scatter  one local reduce_scatter per host (partial sums of the blocks of that host's
                  ranks), then cross reduce_scatter of the partials.
  barrier         local barrier, cross barrier among the indexes 0, local barrier.

What crosses hosts: all_reduce 2(H-1)/H·S per host pair and direction; flat ring all_reduce in
group order sends 2(n-1)/n·S over each of its host-crossing edges.

The calls on the inner groups go through ``ops`` (group.collective_ops, handed in by the
caller: this module imports neither it nor ProcessGroup). Inner groups are created through
``make_group(key, global_ranks)``, the same key giving the same group id on every member.
Must not know about transports, the API or env variables.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..collectives.algorithm import Algorithm
from ..reduce_ops import RedOpType, ReduceOp

HIERARCHICAL = "hierarchical"  # the algorithms' kind and name
CODE = 0x48  # in fingerprints: ranks that chose differently get an error
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")
MAX_PIECES = 32  # of a pipelined all_reduce
PROBE_BYTES = 4 << 20  # auto: the all_reduces measured to decide are this size or larger
PROBE_CALLS = 3  # the first is a warm-up (pages, connections, late arrivals)
# Auto pipelines where cross stage / (local reduce_scatter + all_gather) is at least this:
NETWORK_BOUND = 1.0  # with two cores per local rank (the overlap costs little)
FEW_CORES_BOUND = 3.0  # with fewer (measured: 2 cores, 4 ranks, README)
PIECE_SECONDS = 0.002  # auto: a piece's time on the network, within the two sizes below
AUTO_PIECE_LIMITS = (256 << 10, 4 << 20)  # the smallest and largest auto piece
# Pipelining wishes, as the members vote them (the MIN wins): never, measure first, or a size.
_NEVER, _MEASURE = -2, -1


def _not_run_directly(*_: Any) -> None:  # pragma: no cover - launch runs Hierarchy.run
    raise RuntimeError("a hierarchical algorithm runs through Hierarchy.run")


ALGORITHMS = {
    name: Algorithm(
        name,
        HIERARCHICAL,
        CODE,
        _not_run_directly,
        "inside each host over shared memory, between hosts over the network",
        HIERARCHICAL,
    )
    for name in COLLECTIVES
}

MakeGroup = Callable[[str, Sequence[int]], Any]


class Hierarchy:
    """The layout of one group across hosts and its inner groups (made on first use)."""

    def __init__(
        self,
        hosts: list[list[int]],
        rank: int,
        global_ranks: Sequence[int],
        make_group: MakeGroup,
        pipeline_bytes: int | None = 0,
    ) -> None:
        self.hosts = hosts  # group ranks on each host, hosts in order of their first member
        self.host = next(h for h, members in enumerate(hosts) if rank in members)
        self.index = hosts[self.host].index(rank)
        self._global = list(global_ranks)
        self._make_group = make_group
        #: This rank's wish (None: auto, measure first); every member pipelines alike once
        #: they agreed (``_agree_pipeline``).
        self.pipeline_bytes = pipeline_bytes
        #: Auto pipelines where the network stage is this many times the host's stages.
        self.bound = NETWORK_BOUND if _cores() >= 2 * len(hosts[self.host]) else FEW_CORES_BOUND
        self._agreed: int | None = None  # the piece size (0: one piece), _MEASURE, or not yet
        #: The stage times measured so far (local, cross; seconds), then what decided.
        self.measured: list[tuple[float, float]] = []
        self._local: Any = None
        self._cross: Any = None

    @classmethod
    def of(
        cls,
        host_ids: Sequence[str],
        global_ranks: Sequence[int],
        rank: int,
        make_group: MakeGroup,
        pipeline_bytes: int | None = 0,
    ) -> Hierarchy | None:
        """The hierarchy of a group (its members' global ranks, this rank's group rank), or
        None when a flat algorithm is as good: one host, one member on some host, or hosts
        with different numbers of members."""
        order: dict[str, list[int]] = {}
        for group_rank, global_rank in enumerate(global_ranks):
            order.setdefault(host_ids[global_rank], []).append(group_rank)
        hosts = list(order.values())
        if len(hosts) < 2 or len({len(h) for h in hosts}) != 1 or len(hosts[0]) < 2:
            return None
        return cls(hosts, rank, global_ranks, make_group, pipeline_bytes)

    def __repr__(self) -> str:
        return (
            f"<Hierarchy {len(self.hosts)} hosts × {len(self.hosts[0])}, host {self.host} index {self.index}>"
        )

    def choose(self, collective: str, nbytes: int, tunables: Any) -> Algorithm | None:
        """The hierarchical algorithm where it beats the flat one, else None. Measured on two
        network-namespace hosts × 2 ranks (README): all_reduce above the small-message size,
        broadcast from a pipeline segment up (below, one flat tree over the mesh is quicker
        than two stages), all_gather, reduce_scatter and barrier at every size."""
        if collective == "all_reduce" and nbytes <= tunables.small_message_bytes:
            return None
        if collective == "broadcast" and nbytes < tunables.segment_bytes:
            return None
        return ALGORITHMS.get(collective)

    # -- inner groups --------------------------------------------------------------------------
    def local(self) -> Any:
        if self._local is None:
            members = [self._global[r] for r in self.hosts[self.host]]
            self._local = self._make_group(f"host{self.host}", members)
        return self._local

    def cross(self) -> Any:
        if self._cross is None:
            members = [self._global[h[self.index]] for h in self.hosts]
            self._cross = self._make_group(f"index{self.index}", members)
        return self._cross

    def groups(self) -> tuple[Any, Any]:
        """Both inner groups, made in the same order on every member."""
        return self.local(), self.cross()

    # -- the algorithms ------------------------------------------------------------------------
    def run(self, collective: str, args: Sequence[Any], ops: Any) -> None:
        """Run ``collective`` with the arguments its flat algorithm would get."""
        self.groups()
        getattr(self, f"_{collective}")(ops, *args)

    def _all_reduce(self, ops: Any, flat: np.ndarray, kernel: Any) -> None:
        first, rest = _stage_ops(kernel.op)
        data = _user_view(flat, kernel)
        local, cross = self._local, self._cross
        width = len(self.hosts[0])
        if self._agreed is None:
            self._agree_pipeline(ops)
        if flat.size < width:
            ops.reduce(local, data, 0, first, False)
            if self.index == 0:
                ops.all_reduce(cross, data, rest, False)
            ops.broadcast(local, data, 0, False)
            return
        pieces = self.pieces(flat.nbytes, flat.size)
        if len(pieces) == 1:
            chunks = [data[a:b] for a, b in _bounds(flat.size, width)]
            mine = _empty_like(chunks[self.index])
            if self._agreed == _MEASURE and flat.nbytes >= PROBE_BYTES:
                self._probe(ops, chunks, mine, first, rest, flat.nbytes)
                return
            ops.reduce_scatter(local, mine, chunks, first, False)
            ops.all_reduce(cross, mine, rest, False)
            ops.all_gather(local, chunks, mine, False)
            return
        crossing: tuple[Any, list[Any], Any] | None = None  # the piece on the network
        for start, end in pieces:
            chunks = [data[start + a : start + b] for a, b in _bounds(end - start, width)]
            mine = _empty_like(chunks[self.index])
            ops.reduce_scatter(local, mine, chunks, first, False)
            work = ops.all_reduce(cross, mine, rest, True)
            if crossing is not None:
                _spread(ops, local, *crossing)
            crossing = (work, chunks, mine)
        assert crossing is not None
        _spread(ops, local, *crossing)

    def _agree_pipeline(self, ops: Any) -> None:
        """Once, at the first all_reduce: one piece if some member does not pipeline, else
        measure first if some member would, else the smallest piece size any member asked
        for, so that every member cuts its calls alike whatever its cores or settings."""
        wish = self.pipeline_bytes
        vote = _MEASURE if wish is None else (wish if wish > 0 else _NEVER)
        agreed = self._vote(ops, vote)
        self._agreed = 0 if agreed == _NEVER else agreed

    def _probe(
        self, ops: Any, chunks: list[Any], mine: Any, first: ReduceOp, rest: ReduceOp, nbytes: int
    ) -> None:
        """One all_reduce in one piece, each stage timed from a barrier of the ranks that
        run it (so that a late peer's wait counts as no stage's time); after PROBE_CALLS
        of them, decide. Every member is in this call (the same size): they decide alike."""
        local, cross, clock = self._local, self._cross, time.perf_counter
        ops.barrier(local, False)
        start = clock()
        ops.reduce_scatter(local, mine, chunks, first, False)
        reduced = clock()
        ops.barrier(cross, False)
        crossing = clock()
        ops.all_reduce(cross, mine, rest, False)
        crossed = clock()
        ops.barrier(local, False)
        gathering = clock()
        ops.all_gather(local, chunks, mine, False)
        self.measured.append((reduced - start + clock() - gathering, crossed - crossing))
        if len(self.measured) == PROBE_CALLS:
            self._decide(ops, nbytes)

    def _decide(self, ops: Any, nbytes: int) -> None:
        """After the measured all_reduces (``nbytes`` each): pipeline if the network stage
        is the slow one, in pieces of about PIECE_SECONDS on the network. Each member's
        quickest time of each stage (warm-up and hiccups drop out); then over the members
        the quickest host stages (a member that was descheduled inflates only its own) and
        the slowest network stage (the flows share the link: one may end early), and the
        strictest bound: every member decides from the same numbers."""
        local_s = min(m[0] for m in self.measured)
        cross_s = min(m[1] for m in self.measured)
        votes = np.array([-local_s, cross_s, self.bound])  # one MAX: -local gives the MIN
        ops.all_reduce(self._local, votes, ReduceOp(RedOpType.MAX), False)
        ops.all_reduce(self._cross, votes, ReduceOp(RedOpType.MAX), False)
        local_s, cross_s, bound = -float(votes[0]), float(votes[1]), float(votes[2])
        self.measured.append((local_s, cross_s))
        self._agreed = _piece_bytes(nbytes, cross_s) if cross_s >= bound * local_s else 0

    def _vote(self, ops: Any, value: int) -> int:
        """The MIN of every member's ``value``: inside each host, then across hosts."""
        vote = np.array([value], np.int64)
        ops.all_reduce(self._local, vote, ReduceOp(RedOpType.MIN), False)
        ops.all_reduce(self._cross, vote, ReduceOp(RedOpType.MIN), False)
        return int(vote[0])

    def pieces(self, nbytes: int, count: int) -> list[tuple[int, int]]:
        """The pieces a pipelined all_reduce of ``count`` elements (``nbytes``) runs in: each
        at least the agreed piece size and L elements, at most MAX_PIECES of them (one
        while the members have not agreed, or measure first)."""
        piece = self._agreed or 0
        if piece <= 0:
            return [(0, count)]
        parts = min(MAX_PIECES, nbytes // piece, count // len(self.hosts[0]))
        return _bounds(count, max(parts, 1))

    def _broadcast(self, ops: Any, flat: np.ndarray, src: int) -> None:
        root_host = next(h for h, members in enumerate(self.hosts) if src in members)
        root_index = self.hosts[root_host].index(src)
        crossing = self.index == root_index  # this rank takes part between hosts
        pieces = self.pieces(flat.nbytes, flat.size)
        if len(pieces) == 1:
            if crossing:
                ops.broadcast(self._cross, flat, root_host, False)
            ops.broadcast(self._local, flat, root_index, False)
            return
        # where all_reduce found the network slow: piece i crosses while piece i-1 is passed on
        pending: tuple[Any, np.ndarray] | None = None
        for start, end in pieces:
            part = flat[start:end]
            work = ops.broadcast(self._cross, part, root_host, True) if crossing else None
            if pending is not None:
                _pass_on(ops, self._local, root_index, *pending)
            pending = (work, part)
        assert pending is not None
        _pass_on(ops, self._local, root_index, *pending)

    def _all_gather(self, ops: Any, inp: np.ndarray, outs: Sequence[np.ndarray]) -> None:
        mine = [outs[members[self.index]] for members in self.hosts]
        ops.all_gather(self._cross, mine, inp, False)
        for members in self.hosts:
            ops.all_gather(self._local, [outs[r] for r in members], outs[members[self.index]], False)

    def _reduce_scatter(self, ops: Any, out: np.ndarray, ins: Sequence[np.ndarray], kernel: Any) -> None:
        first, rest = _stage_ops(kernel.op)
        data = [_user_view(b, kernel) for b in ins]
        partials = []
        for members in self.hosts:
            partial = _empty_like(data[members[self.index]])
            ops.reduce_scatter(self._local, partial, [data[r] for r in members], first, False)
            partials.append(partial)
        ops.reduce_scatter(self._cross, _user_view(out, kernel), partials, rest, False)

    def _barrier(self, ops: Any) -> None:
        ops.barrier(self._local, False)
        if self.index == 0:
            ops.barrier(self._cross, False)
        ops.barrier(self._local, False)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _piece_bytes(nbytes: int, cross_s: float) -> int:
    """The auto piece size: a power of two that the network moves in about PIECE_SECONDS,
    going by the measured all_reduce (``nbytes`` in ``cross_s`` between hosts)."""
    low, high = AUTO_PIECE_LIMITS
    wanted = nbytes * PIECE_SECONDS / max(cross_s, 1e-9)
    return max(low, min(high, 1 << max(int(wanted), 1).bit_length() - 1))


def _pass_on(ops: Any, local: Any, root_index: int, work: Any, part: np.ndarray) -> None:
    """The last stage of one piece of a broadcast: across hosts done, then inside the host."""
    if work is not None:
        work.wait()
    ops.broadcast(local, part, root_index, False)


def _spread(ops: Any, local: Any, work: Any, chunks: list[Any], mine: Any) -> None:
    """The last stage of one piece: its cross all_reduce done, the slices gathered locally."""
    work.wait()
    ops.all_gather(local, chunks, mine, False)


def _stage_ops(op: ReduceOp) -> tuple[ReduceOp, ReduceOp]:
    """The ops of the first (inside hosts) and later (between hosts) stages: AVG averages at
    both (an average of averages of equal counts; integers truncate alike), PREMUL_SUM
    multiplies once, then sums; the others are the same at both stages."""
    if op.op == RedOpType.PREMUL_SUM:
        return op, ReduceOp(RedOpType.SUM)
    return op, op


def _bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` slices of ``count`` elements, as equal as possible."""
    base, extra = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def _user_view(flat: np.ndarray, kernel: Any) -> Any:
    """What the inner calls reduce: ``flat`` itself, or for bfloat16 (carried as uint16) a
    torch bfloat16 view of it (the inner calls then reduce bfloat16, not integers)."""
    if not kernel.bfloat16:
        return flat
    torch = sys.modules["torch"]  # bfloat16 buffers only come from torch tensors
    return torch.from_numpy(flat).view(torch.bfloat16)


def _empty_like(block: Any) -> Any:
    if isinstance(block, np.ndarray):
        return np.empty_like(block)
    torch = sys.modules["torch"]
    return torch.empty_like(block)
