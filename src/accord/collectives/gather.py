"""gather algorithms: linear (the default) and binomial tree (small blocks, many ranks).

Owns: the two schedules of ``gather(call, inp, outs, root)``: on the root ``outs[i]``
receives rank i's input; ``outs`` is None elsewhere. Every rank's block has the same size
(the API checks it and the fingerprint carries it), which is what lets a tree node size its
subtree's buffer. Must not know about transports, stores or groups: only ``Peers``.
"""

from __future__ import annotations

import numpy as np

from ..config import Tunables
from .algorithm import MESSAGES, Algorithm
from .patterns import binomial_children, binomial_extent, binomial_parent, real_rank, virtual_rank
from .peers import Peers, send


def linear(peers: Peers, inp: np.ndarray, outs: list[np.ndarray] | None, root: int) -> None:
    """Every rank sends its block to the root, which receives each straight into place.

    Cost: (p-1)·α at the root + (p-1)/p·Sβ (S = all blocks) — bandwidth-optimal.
    """
    n, r = peers.size, peers.rank
    if r != root:
        send(peers, root, inp, 0)
        return
    assert outs is not None
    outs[r][...] = inp
    peers.wait(*[peers.irecv(j, outs[j], 0) for j in range(n) if j != r])


def binomial(peers: Peers, inp: np.ndarray, outs: list[np.ndarray] | None, root: int) -> None:
    """Blocks flow up a binomial tree; each node packs its subtree's blocks (in virtual-rank
    order) and sends them to its parent in one message.

    Cost: ⌈log2 p⌉·α + (p-1)/p·Sβ at the root, plus a copy per level — for small blocks on
    many ranks.
    """
    n = peers.size
    me = virtual_rank(peers.rank, root, n)
    parent = binomial_parent(me)
    children = binomial_children(me, n)
    count = inp.size
    if parent is not None and not children:
        send(peers, real_rank(parent, root, n), inp, 0)
        return
    packed = peers.scratch(binomial_extent(me, n) * count, inp.dtype)
    posted = []
    for child in children:
        start, stop = (child - me) * count, (child - me + binomial_extent(child, n)) * count
        posted.append(peers.irecv(real_rank(child, root, n), packed[start:stop], 0))
    packed[:count] = inp
    peers.wait(*posted)
    if parent is not None:
        send(peers, real_rank(parent, root, n), packed, 0)
        return
    assert outs is not None
    for v in range(n):
        outs[real_rank(v, root, n)][...] = packed[v * count : (v + 1) * count]


def _rule(nbytes: int, size: int, t: Tunables) -> str:
    return "binomial" if size > 4 and nbytes * size <= t.small_message_bytes else "linear"


ALGORITHMS = [
    Algorithm("gather", "linear", 1, linear, "(p-1)·α + (p-1)/p·Sβ at the root: the default"),
    Algorithm(
        "gather", "binomial", 2, binomial, "⌈log2 p⌉·α + (p-1)/p·Sβ + copies: small blocks, more than 4 ranks"
    ),
]
RULES = {("gather", MESSAGES): _rule}
