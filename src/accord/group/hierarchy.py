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
                  all_gather of the slices. Fewer elements than L: local reduce to index 0,
                  cross all_reduce among the indexes 0, local broadcast.
  broadcast       cross broadcast among the root's local index, then local broadcast from it.
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

import sys
from typing import Any, Callable, Sequence

import numpy as np

from ..collectives.algorithm import Algorithm
from ..reduce_ops import RedOpType, ReduceOp

HIERARCHICAL = "hierarchical"  # the algorithms' kind and name
CODE = 0x48  # in fingerprints: ranks that chose differently get an error
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")


def _not_run_directly(*_: Any) -> None:  # pragma: no cover - launch runs Hierarchy.run
    raise RuntimeError("a hierarchical algorithm runs through Hierarchy.run")


ALGORITHMS = {name: Algorithm(name, HIERARCHICAL, CODE, _not_run_directly,
                              "inside each host over shared memory, between hosts over the network",
                              HIERARCHICAL) for name in COLLECTIVES}

MakeGroup = Callable[[str, Sequence[int]], Any]


class Hierarchy:
    """The layout of one group across hosts and its inner groups (made on first use)."""

    def __init__(self, hosts: list[list[int]], rank: int, global_ranks: Sequence[int],
                 make_group: MakeGroup) -> None:
        self.hosts = hosts  # group ranks on each host, hosts in order of their first member
        self.host = next(h for h, members in enumerate(hosts) if rank in members)
        self.index = hosts[self.host].index(rank)
        self._global = list(global_ranks)
        self._make_group = make_group
        self._local: Any = None
        self._cross: Any = None

    @classmethod
    def of(cls, host_ids: Sequence[str], global_ranks: Sequence[int], rank: int,
           make_group: MakeGroup) -> Hierarchy | None:
        """The hierarchy of a group (its members' global ranks, this rank's group rank), or
        None when a flat algorithm is as good: one host, one member on some host, or hosts
        with different numbers of members."""
        order: dict[str, list[int]] = {}
        for group_rank, global_rank in enumerate(global_ranks):
            order.setdefault(host_ids[global_rank], []).append(group_rank)
        hosts = list(order.values())
        if len(hosts) < 2 or len({len(h) for h in hosts}) != 1 or len(hosts[0]) < 2:
            return None
        return cls(hosts, rank, global_ranks, make_group)

    def __repr__(self) -> str:
        return f"<Hierarchy {len(self.hosts)} hosts × {len(self.hosts[0])}, host {self.host} index {self.index}>"

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
        if flat.size < width:
            ops.reduce(local, data, 0, first, False)
            if self.index == 0:
                ops.all_reduce(cross, data, rest, False)
            ops.broadcast(local, data, 0, False)
            return
        chunks = [data[a:b] for a, b in _bounds(flat.size, width)]
        mine = _empty_like(chunks[self.index])
        ops.reduce_scatter(local, mine, chunks, first, False)
        ops.all_reduce(cross, mine, rest, False)
        ops.all_gather(local, chunks, mine, False)

    def _broadcast(self, ops: Any, flat: np.ndarray, src: int) -> None:
        root_host = next(h for h, members in enumerate(self.hosts) if src in members)
        root_index = self.hosts[root_host].index(src)
        if self.index == root_index:
            ops.broadcast(self._cross, flat, root_host, False)
        ops.broadcast(self._local, flat, root_index, False)

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
