"""scatter algorithms: linear (the default) and binomial tree (small blocks, many ranks).

Owns: the two schedules of ``scatter(call, out, ins, root)``: rank i's ``out`` receives the
root's ``ins[i]``; ``ins`` is None elsewhere. Every block has the same size (the API checks
it and the fingerprint carries it), which is what lets a tree node size its subtree's
buffer. Must not know about transports, stores or groups: only ``Peers``.
"""

from __future__ import annotations

import numpy as np

from ..config import Tunables
from .algorithm import MESSAGES, Algorithm
from .patterns import binomial_children, binomial_extent, binomial_parent, real_rank, virtual_rank
from .peers import Peers, recv


def linear(peers: Peers, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
    """The root sends every rank its block; each receives straight into ``out``.

    Cost: (p-1)·α at the root + (p-1)/p·Sβ (S = all blocks) — bandwidth-optimal.
    """
    n, r = peers.size, peers.rank
    if r != root:
        recv(peers, root, out, 0)
        return
    assert ins is not None
    sends = [peers.isend(j, ins[j], 0) for j in ((r + i) % n for i in range(1, n))]
    out[...] = ins[r]
    peers.wait(*sends)


def binomial(peers: Peers, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
    """Blocks flow down a binomial tree: each node receives its subtree's blocks (packed in
    virtual-rank order) in one message, keeps the first and forwards each child's share.

    Cost: ⌈log2 p⌉·α + (p-1)/p·Sβ at the root, plus a copy per level — for small blocks on
    many ranks.
    """
    n = peers.size
    me = virtual_rank(peers.rank, root, n)
    parent = binomial_parent(me)
    children = binomial_children(me, n)
    count = out.size
    if parent is not None and not children:
        recv(peers, real_rank(parent, root, n), out, 0)
        return
    packed = peers.scratch(binomial_extent(me, n) * count, out.dtype)
    if parent is None:
        assert ins is not None
        for v in range(n):
            packed[v * count : (v + 1) * count] = ins[real_rank(v, root, n)]
    else:
        recv(peers, real_rank(parent, root, n), packed, 0)
    sends = []
    for child in children:
        start, stop = (child - me) * count, (child - me + binomial_extent(child, n)) * count
        sends.append(peers.isend(real_rank(child, root, n), packed[start:stop], 0))
    out[...] = packed[:count]
    peers.wait(*sends)


def _rule(nbytes: int, size: int, t: Tunables) -> str:
    return "binomial" if size > 4 and nbytes * size <= t.small_message_bytes else "linear"


ALGORITHMS = [
    Algorithm("scatter", "linear", 1, linear, "(p-1)·α + (p-1)/p·Sβ at the root: the default"),
    Algorithm(
        "scatter",
        "binomial",
        2,
        binomial,
        "⌈log2 p⌉·α + (p-1)/p·Sβ + copies: small blocks, more than 4 ranks",
    ),
]
RULES = {("scatter", MESSAGES): _rule}
