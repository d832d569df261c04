"""all_to_all algorithms: direct (everything at once) and pairwise (one peer per step).

Owns: the two schedules of ``all_to_all(call, outs, ins)``: ``ins[j]`` goes to rank j and
``outs[j]`` comes from rank j. Sizes may differ for every pair (the docs' uneven example):
a receive names ``outs[j]``, which must be exactly what rank j sends (else the transport
raises CollectiveMismatchError). Must not know about transports, stores or groups: only
``Peers``.
"""

from __future__ import annotations

import numpy as np

from .algorithm import MESSAGES, Algorithm
from .peers import Peers, exchange


def direct(peers: Peers, outs: list[np.ndarray], ins: list[np.ndarray]) -> None:
    """Every receive is posted, then every send (to r+1, r+2, … so that ranks do not all
    start on the same peer), then everything is waited for.

    Cost: α + (p-1)/p·Sβ with p-1 messages in flight per rank (S = a rank's total) — the
    choice for up to 8 ranks at every size (Open MPI's, too), and for small messages.
    """
    n, r = peers.size, peers.rank
    posted = [peers.irecv(j, outs[j], 0) for j in ((r - i) % n for i in range(1, n))]
    posted += [peers.isend(j, ins[j], 0) for j in ((r + i) % n for i in range(1, n))]
    outs[r][...] = ins[r]
    peers.wait(*posted)


def pairwise(peers: Peers, outs: list[np.ndarray], ins: list[np.ndarray]) -> None:
    """p-1 steps; in step i a rank sends to r+i and receives from r-i, one exchange at a
    time, which bounds how much is in flight towards any one rank (no incast).

    Cost: (p-1)·(α + Sβ/p) — for large messages on many ranks.
    """
    n, r = peers.size, peers.rank
    outs[r][...] = ins[r]
    for i in range(1, n):
        dst, src = (r + i) % n, (r - i) % n
        exchange(peers, dst, ins[dst], src, outs[src], i)


ALGORITHMS = [
    Algorithm(
        "all_to_all",
        "direct",
        1,
        direct,
        "α + (p-1)/p·Sβ, all p-1 exchanges in flight: up to 8 ranks, or small S",
    ),
    Algorithm(
        "all_to_all",
        "pairwise",
        2,
        pairwise,
        "(p-1)·(α + Sβ/p), one exchange at a time: large S on more than 8 ranks",
    ),
]
RULES = {
    ("all_to_all", MESSAGES): lambda nbytes, size, t: (
        "direct" if size <= 8 or nbytes <= t.small_message_bytes else "pairwise"
    )
}
