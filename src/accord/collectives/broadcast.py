"""broadcast algorithms: binomial tree (small messages) and pipelined chain (large).

Owns: the two schedules. Must not know about transports, stores or groups: only ``Peers``.
"""

from __future__ import annotations

import numpy as np

from .algorithm import MESSAGES, Algorithm
from .patterns import binomial_children, binomial_parent, real_rank, segments, virtual_rank
from .peers import Peers, recv


def binomial(peers: Peers, buf: np.ndarray, root: int) -> None:
    """Each rank receives the whole buffer once, then forwards it down its subtree.

    Cost: ⌈log2 p⌉·(α + Sβ) on the critical path — chosen for small S.
    """
    n = peers.size
    me = virtual_rank(peers.rank, root, n)
    parent = binomial_parent(me)
    if parent is not None:
        recv(peers, real_rank(parent, root, n), buf, 0)
    sends = [peers.isend(real_rank(child, root, n), buf, 0) for child in binomial_children(me, n)]
    peers.wait(*sends)


def pipeline(peers: Peers, buf: np.ndarray, root: int) -> None:
    """A chain root → root+1 → … in segments: each rank forwards a segment as soon as it has it.

    Cost: (p-2+k)·(α + Sβ/k) for k segments ≈ Sβ for large S — chosen for large S.
    """
    n = peers.size
    me = virtual_rank(peers.rank, root, n)
    seg = max(1, peers.tunables.segment_bytes // max(buf.itemsize, 1))
    pieces = segments(0, buf.size, seg)
    nxt = real_rank(me + 1, root, n) if me + 1 < n else None
    if me == 0:
        if nxt is None:
            return  # a group of one
        peers.wait(*[peers.isend(nxt, buf[a:b], k) for k, (a, b) in enumerate(pieces)])
        return
    prev = real_rank(me - 1, root, n)
    posted = [peers.irecv(prev, buf[a:b], k) for k, (a, b) in enumerate(pieces)]
    forwards = []
    for k, (a, b) in enumerate(pieces):
        peers.wait(posted[k])
        if nxt is not None:
            forwards.append(peers.isend(nxt, buf[a:b], k))
    peers.wait(*forwards)


ALGORITHMS = [
    Algorithm("broadcast", "binomial", 1, binomial, "⌈log2 p⌉·(α + Sβ): for small S"),
    Algorithm("broadcast", "pipeline", 2, pipeline, "(p-2+k)·(α + Sβ/k) with k segments ≈ Sβ: for large S"),
]
RULES = {
    ("broadcast", MESSAGES): lambda nbytes, size, t: (
        "binomial" if nbytes <= t.small_message_bytes else "pipeline"
    )
}
