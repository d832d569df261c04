"""reduce_scatter algorithms: direct (small messages) and segmented ring (large).

Owns: the two schedules of ``reduce_scatter(call, out, ins, kernel)``: rank j's ``out`` gets
the reduction over ranks of their ``ins[j]`` (blocks may differ in size from rank to rank;
``ins[j]`` has the size of rank j's ``out``). The inputs are never modified, and never is the
whole input all-reduced (gloo's way, which moves twice the bytes). Each block is reduced at
one place only. Must not know about transports, stores or groups: only ``Peers``.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..reduce_ops import Kernel
from .algorithm import MESSAGES, Algorithm
from .patterns import segments
from .peers import Peers


def direct(peers: Peers, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """One round: every rank sends block j to rank j, then reduces the blocks it received
    in rank order (so the result does not depend on arrival order).

    Cost: α + (p-1)/p·S(β + γ), p-1 messages per rank — latency-optimal, for small S.
    """
    n, r = peers.size, peers.rank
    count = out.size
    others = [(r + i) % n for i in range(1, n)]
    scratch = peers.scratch(n * count, out.dtype)
    block = [scratch[j * count : (j + 1) * count] for j in range(n)]
    posted = {j: peers.irecv(j, block[j], 0) for j in others}
    sends = [peers.isend(j, ins[j], 0) for j in others]
    block[r][...] = ins[r]  # a copy: ``out`` may be a view of ins[r] (in-place use)
    for j in range(n):
        if j != r:
            peers.wait(posted[j])
        if j == 0:
            out[...] = block[0]
        else:
            kernel.combine(out, block[j])
    kernel.finalize(out, n)
    peers.wait(*sends)


def ring(peers: Peers, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """Block b starts at rank b+1 and travels the ring to rank b, each rank adding its own
    contribution on the way; segments are forwarded as soon as they are combined.

    Every receive is posted first (partial blocks into scratch, the last one into ``out``'s
    shadow in scratch), so nothing parks.
    Cost: (p-1)·α + (p-1)/p·S(β + γ) (pipelined) — bandwidth-optimal, for large S.
    """
    n, r = peers.size, peers.rank
    if n == 1:
        out[...] = ins[0]
        kernel.finalize(out, 1)
        return
    right, left = (r + 1) % n, (r - 1) % n
    seg = max(1, peers.tunables.segment_bytes // max(out.itemsize, 1))
    order = [(r - s - 2) % n for s in range(n - 1)]  # the block that arrives in round s
    sizes = [ins[b].size for b in order]
    offset = [0, *itertools.accumulate(sizes)]
    partial = peers.scratch(offset[-1], out.dtype)
    per = max(len(segments(0, block.size, seg)) for block in ins)
    pieces = [segments(0, size, seg) for size in sizes]
    posted = [
        [
            peers.irecv(left, partial[offset[s] + a : offset[s] + b], s * per + k)
            for k, (a, b) in enumerate(pieces[s])
        ]
        for s in range(n - 1)
    ]
    first = (r - 1) % n
    sends = [
        peers.isend(right, ins[first][a:b], k) for k, (a, b) in enumerate(segments(0, ins[first].size, seg))
    ]
    for s in range(n - 2):
        block, base = ins[order[s]], offset[s]
        for k, (a, b) in enumerate(pieces[s]):
            peers.wait(posted[s][k])
            kernel.combine(partial[base + a : base + b], block[a:b])
            sends.append(peers.isend(right, partial[base + a : base + b], (s + 1) * per + k))
    out[...] = ins[r]
    last = offset[n - 2]
    for k, (a, b) in enumerate(pieces[n - 2]):
        peers.wait(posted[n - 2][k])
        kernel.combine(out[a:b], partial[last + a : last + b])
    kernel.finalize(out, n)
    peers.wait(*sends)


ALGORITHMS = [
    Algorithm(
        "reduce_scatter",
        "direct",
        1,
        direct,
        "α + (p-1)/p·S(β+γ), p-1 messages per rank: latency-optimal, small S",
    ),
    Algorithm(
        "reduce_scatter", "ring", 2, ring, "(p-1)·α + (p-1)/p·S(β+γ), segmented: bandwidth-optimal, large S"
    ),
]
RULES = {
    ("reduce_scatter", MESSAGES): lambda nbytes, size, t: (
        "direct" if nbytes <= t.small_message_bytes else "ring"
    )
}
