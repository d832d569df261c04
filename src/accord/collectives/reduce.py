"""reduce algorithms: binomial tree (small messages) and pipelined chain (large).

Owns: the two schedules of ``reduce(call, buf, kernel, root)``. The root ends with the
reduction of every rank's ``buf``; every other rank's ``buf`` is left unchanged (partial
results live in ``call.scratch``, taken once per call). Must not know about transports,
stores or groups: only ``Peers``.
"""

from __future__ import annotations

import numpy as np

from ..reduce_ops import Kernel
from .algorithm import MESSAGES, Algorithm
from .patterns import binomial_children, binomial_parent, real_rank, segments, virtual_rank
from .peers import Peers, send


def binomial(peers: Peers, buf: np.ndarray, kernel: Kernel, root: int) -> None:
    """Each rank combines its children's partial results, then sends its own to its parent.

    All receives are posted first (one scratch slot per child), so nothing parks; children
    are combined smallest subtree first, the order in which their data can be ready.
    Cost: ⌈log2 p⌉·(α + Sβ + Sγ) on the critical path — latency-optimal, for small S.
    """
    n = peers.size
    me = virtual_rank(peers.rank, root, n)
    children = [real_rank(c, root, n) for c in reversed(binomial_children(me, n))]
    parent = binomial_parent(me)
    if parent is not None and not children:  # a leaf sends its input as it is
        send(peers, real_rank(parent, root, n), buf, 0)
        return
    count = buf.size
    own = 0 if parent is None else count  # non-roots accumulate in scratch, not in buf
    scratch = peers.scratch(own + len(children) * count, buf.dtype)
    slots = [scratch[own + i * count : own + (i + 1) * count] for i in range(len(children))]
    posted = [peers.irecv(child, slot, 0) for child, slot in zip(children, slots)]
    acc = buf
    if parent is not None:
        acc = scratch[:count]
        acc[...] = buf
    for handle, slot in zip(posted, slots):
        peers.wait(handle)
        kernel.combine(acc, slot)
    if parent is None:
        kernel.finalize(acc, n)
    else:
        send(peers, real_rank(parent, root, n), acc, 0)


def chain(peers: Peers, buf: np.ndarray, kernel: Kernel, root: int) -> None:
    """A chain root+p-1 → … → root+1 → root in segments: each rank combines a segment as
    soon as it arrives and forwards it at once, so all links work at the same time.

    Every receive is posted ahead into scratch (nothing parks).
    Cost: (p-2+k)·(α + Sβ/k + Sγ/k) with k segments ≈ S(β + γ) — for large S.
    """
    n = peers.size
    me = virtual_rank(peers.rank, root, n)
    prev = real_rank(me + 1, root, n) if me + 1 < n else None  # sends to us
    nxt = real_rank(me - 1, root, n) if me > 0 else None  # we send to it
    seg = max(1, peers.tunables.segment_bytes // max(buf.itemsize, 1))
    pieces = segments(0, buf.size, seg)
    if prev is None:  # the far end of the chain (or a group of one)
        if nxt is not None:
            peers.wait(*[peers.isend(nxt, buf[a:b], k) for k, (a, b) in enumerate(pieces)])
        else:
            kernel.finalize(buf, n)
        return
    count = buf.size
    scratch = peers.scratch((2 if nxt is not None else 1) * count, buf.dtype)
    incoming = scratch[:count]
    acc = buf
    if nxt is not None:
        acc = scratch[count:]
        acc[...] = buf
    posted = [peers.irecv(prev, incoming[a:b], k) for k, (a, b) in enumerate(pieces)]
    forwards = []
    for k, (a, b) in enumerate(pieces):
        peers.wait(posted[k])
        kernel.combine(acc[a:b], incoming[a:b])
        if nxt is not None:
            forwards.append(peers.isend(nxt, acc[a:b], k))
    if nxt is None:
        kernel.finalize(acc, n)
    peers.wait(*forwards)


ALGORITHMS = [
    Algorithm("reduce", "binomial", 1, binomial, "⌈log2 p⌉·(α + Sβ + Sγ): latency-optimal, for small S"),
    Algorithm(
        "reduce", "chain", 2, chain, "(p-2+k)·(α + S(β+γ)/k) with k segments ≈ S(β+γ): pipelined, for large S"
    ),
]
RULES = {
    ("reduce", MESSAGES): lambda nbytes, size, t: "binomial" if nbytes <= t.small_message_bytes else "chain"
}
