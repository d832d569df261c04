"""all_reduce algorithms: recursive doubling (small messages) and segmented ring (large).

Owns: the two schedules. Every rank ends with bit-identical results (each combination is
done once and then copied, or done symmetrically with commutative ops). Must not know about
transports, stores or groups: only ``Peers``.
"""

from __future__ import annotations

import math

import numpy as np

from ..reduce_ops import Kernel
from .algorithm import MESSAGES, Algorithm
from .patterns import chunk_bounds, largest_power_of_two, segments
from .peers import Peers, exchange, recv, send


def recursive_doubling(peers: Peers, buf: np.ndarray, kernel: Kernel) -> None:
    """⌈log2 p⌉ exchanges of the whole buffer; non-powers of two fold the extra ranks first.

    Cost: (⌈log2 p⌉ + 2)·(α + Sβ) — latency-optimal, so chosen for small S.
    """
    n, r = peers.size, peers.rank
    p = largest_power_of_two(n)
    rem = n - p
    tmp = peers.scratch(buf.size, buf.dtype)
    last_step = p.bit_length() + 1
    if r < 2 * rem and r % 2 == 0:  # folded out: hand the data over, get the result back
        send(peers, r + 1, buf, 0)
        recv(peers, r + 1, buf, last_step)
        return
    if r < 2 * rem:
        recv(peers, r - 1, tmp, 0)
        kernel.combine(buf, tmp)
    me = r // 2 if r < 2 * rem else r - rem
    mask, step = 1, 1
    while mask < p:
        other = me ^ mask
        partner = other * 2 + 1 if other < rem else other + rem
        exchange(peers, partner, buf, partner, tmp, step)
        kernel.combine(buf, tmp)
        mask, step = mask << 1, step + 1
    kernel.finalize(buf, n)
    if r < 2 * rem:
        send(peers, r - 1, buf, last_step)


def ring(peers: Peers, buf: np.ndarray, kernel: Kernel) -> None:
    """Reduce-scatter then all-gather around a ring, pipelined segment by segment.

    A segment is forwarded to the right as soon as it is combined (reduce-scatter) or has
    landed (all-gather). Receives are posted ahead (the all-gather ones straight into the
    result, which is safe: data for a chunk can only arrive after this rank's last use of it
    reached the peer), so nothing waits in a parking buffer.
    Cost: 2(p-1)·α + 2(p-1)/p·Sβ + (p-1)/p·Sγ — bandwidth-optimal, chosen for large S.
    """
    n, r = peers.size, peers.rank
    if n == 1:
        kernel.finalize(buf, 1)
        return
    right, left = (r + 1) % n, (r - 1) % n
    chunks = chunk_bounds(buf.size, n)
    seg = max(1, peers.tunables.segment_bytes // max(buf.itemsize, 1))
    per = max(1, math.ceil((chunks[0][1] - chunks[0][0]) / seg))  # segments of the largest chunk
    width = chunks[0][1] - chunks[0][0]
    scratch = peers.scratch(2 * width, buf.dtype)
    slots = (scratch[:width], scratch[width:])

    def post(step: int, target: np.ndarray, base: int, chunk: tuple[int, int]) -> list:
        return [
            peers.irecv(left, target[a - base : b - base], step * per + k)
            for k, (a, b) in enumerate(segments(*chunk, seg))
        ]

    gather = [post(n - 1 + s, buf, 0, chunks[(r - s) % n]) for s in range(n - 1)]
    pending = post(0, slots[0], chunks[(r - 1) % n][0], chunks[(r - 1) % n])
    sends = [peers.isend(right, buf[a:b], k) for k, (a, b) in enumerate(segments(*chunks[r], seg))]
    for s in range(n - 1):
        chunk = chunks[(r - s - 1) % n]
        upcoming = chunks[(r - s - 2) % n]
        following = post(s + 1, slots[(s + 1) % 2], upcoming[0], upcoming) if s + 1 < n - 1 else []
        for k, (a, b) in enumerate(segments(*chunk, seg)):
            peers.wait(pending[k])
            kernel.combine(buf[a:b], slots[s % 2][a - chunk[0] : b - chunk[0]])
            if s == n - 2:
                kernel.finalize(buf[a:b], n)  # this rank's chunk is complete: start the all-gather
            sends.append(peers.isend(right, buf[a:b], (s + 1) * per + k))
        pending = following
    for s in range(n - 2):
        for k, (a, b) in enumerate(segments(*chunks[(r - s) % n], seg)):
            peers.wait(gather[s][k])
            sends.append(peers.isend(right, buf[a:b], (n + s) * per + k))
    peers.wait(*gather[n - 2], *sends)


ALGORITHMS = [
    Algorithm(
        "all_reduce",
        "recursive_doubling",
        1,
        recursive_doubling,
        "(⌈log2 p⌉+2)·(α + Sβ): latency-optimal, for small S",
    ),
    Algorithm(
        "all_reduce", "ring", 2, ring, "2(p-1)·α + 2(p-1)/p·Sβ: bandwidth-optimal, segmented, for large S"
    ),
]
RULES = {
    ("all_reduce", MESSAGES): lambda nbytes, size, t: (
        "recursive_doubling" if nbytes <= t.small_message_bytes else "ring"
    )
}
