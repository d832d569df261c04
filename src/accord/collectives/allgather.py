"""all_gather algorithms: direct and Bruck (small messages), segmented ring (large).

Owns: the three schedules of ``all_gather(call, inp, outs)``: ``outs[i]`` receives rank i's
input. Blocks may differ in size from rank to rank; every rank knows every size from its
output list, so every receive names a buffer of exactly the sender's size. Every rank ends
with the same bytes (blocks are copied, never combined). Must not know about transports,
stores or groups: only ``Peers``.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..config import Tunables
from .algorithm import MESSAGES, Algorithm
from .patterns import segments
from .peers import Peers, exchange


def direct(peers: Peers, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """One round: every rank sends its block to every other rank, straight into place.

    Cost: α + (p-1)/p·Sβ, with p-1 messages per rank — for small S and few ranks.
    """
    n, r = peers.size, peers.rank
    outs[r][...] = inp
    others = [(r + i) % n for i in range(1, n)]
    posted = [peers.irecv(j, outs[j], 0) for j in others]
    posted += [peers.isend(j, inp, 0) for j in others]
    peers.wait(*posted)


def bruck(peers: Peers, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """Bruck et al. (1997): ⌈log2 p⌉ rounds for any p, one message per round.

    The blocks a rank holds are packed in scratch in the order r, r+1, …; in round k it
    sends its first min(2^k, p - 2^k) blocks to rank r - 2^k and appends as many from
    rank r + 2^k. A final pass copies every block to its place.
    Cost: ⌈log2 p⌉·α + (p-1)/p·Sβ + 2S copies — latency-optimal, for small S.
    """
    n, r = peers.size, peers.rank
    sizes = [outs[(r + i) % n].size for i in range(n)]  # in packed (rotated) order
    offset = [0, *itertools.accumulate(sizes)]
    packed = peers.scratch(offset[n], inp.dtype)
    packed[: sizes[0]] = inp
    held, distance, step = 1, 1, 0
    while held < n:
        count = min(distance, n - held)
        exchange(
            peers,
            (r - distance) % n,
            packed[: offset[count]],
            (r + distance) % n,
            packed[offset[held] : offset[held + count]],
            step,
        )
        held, distance, step = held + count, distance << 1, step + 1
    for i in range(n):
        outs[(r + i) % n][...] = packed[offset[i] : offset[i + 1]]


def ring(peers: Peers, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """Each block travels once around the ring, in segments forwarded as soon as they land.

    Every receive is posted first, straight into its final place, so nothing parks and
    nothing is copied except this rank's own block.
    Cost: (p-1)·α + (p-1)/p·Sβ (pipelined) — bandwidth-optimal, for large S.
    """
    n, r = peers.size, peers.rank
    outs[r][...] = inp
    if n == 1:
        return
    right, left = (r + 1) % n, (r - 1) % n
    seg = max(1, peers.tunables.segment_bytes // max(inp.itemsize, 1))
    pieces = [segments(0, out.size, seg) for out in outs]
    per = max(len(p) for p in pieces)  # step numbers: round s, segment k → s·per + k
    posted = []
    for s in range(n - 1):
        b = (r - s - 1) % n  # the block that arrives in round s
        posted.append([peers.irecv(left, outs[b][x:y], s * per + k) for k, (x, y) in enumerate(pieces[b])])
    sends = [peers.isend(right, outs[r][x:y], k) for k, (x, y) in enumerate(pieces[r])]
    for s in range(n - 2):  # the last round's blocks are not forwarded
        b = (r - s - 1) % n
        for k, (x, y) in enumerate(pieces[b]):
            peers.wait(posted[s][k])
            sends.append(peers.isend(right, outs[b][x:y], (s + 1) * per + k))
    peers.wait(*posted[n - 2], *sends)


def _rule(nbytes: int, size: int, t: Tunables) -> str:
    """Few ranks: everything in flight at once (no forwarding chain; measured faster up to 4
    ranks, most of all on an oversubscribed host). More ranks: Bruck when small, the ring
    (bounded in-flight data, no incast) when large."""
    if size <= 3 or (size <= 4 and nbytes > t.small_message_bytes):
        return "direct"
    return "bruck" if nbytes <= t.small_message_bytes else "ring"


ALGORITHMS = [
    Algorithm(
        "all_gather",
        "direct",
        1,
        direct,
        "α + (p-1)/p·Sβ, p-1 messages in flight per rank: up to 3 ranks, or 4 with large S",
    ),
    Algorithm("all_gather", "bruck", 2, bruck, "⌈log2 p⌉·α + (p-1)/p·Sβ: latency-optimal for any p, small S"),
    Algorithm("all_gather", "ring", 3, ring, "(p-1)·α + (p-1)/p·Sβ, segmented: large S on more than 4 ranks"),
]
RULES = {("all_gather", MESSAGES): _rule}
