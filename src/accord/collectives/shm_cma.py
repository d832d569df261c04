"""Single-copy shared-memory algorithms: ranks read each other's buffers directly (CMA).

Owns: schedules over ``Slots`` that ``expose`` the user's buffer and ``fetch`` straight from a
peer's (one kernel copy, no slot in between): all_reduce (two-shot: each rank reduces its
slice from everyone, piece by piece, and ``put``s each reduced piece into the others' buffers
while it is in cache), broadcast, all_gather,
reduce_scatter, all_to_all, reduce, scatter. One round each. A rank
whose buffer others read waits for their ``done`` before it returns, so the caller may reuse
it at once. Chosen for large messages where the group may read its members' memory. Must not
know about segments, sockets or the kernel call: only ``Slots``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..reduce_ops import Kernel
from .algorithm import Algorithm, Rule
from .patterns import chunk_bounds
from .slots import Slots

LIST_MAX = 96  # blocks a rank can expose at once (the shared-memory control area's list)

CMA = "cma"
#: At or above this many bytes per rank, reading peers directly beats going through slots.
THRESHOLD = 64 << 10
#: Bytes fetched and folded at a time by the reducing algorithms (about half an L2 cache).
_PIECE = 512 << 10


def all_reduce(slots: Slots, buf: np.ndarray, kernel: Kernel) -> None:
    """Rank r owns slice r: piece by piece (cache-sized), it reads that piece of every peer's
    buffer, folds it into its own, and writes the reduced piece straight into every peer's
    buffer while it is still in cache. Each byte of each buffer is read from memory once and
    written once (the least traffic an in-place all_reduce can have): per rank (n-1)/n·S read
    from peers, (n-1)/n·S written to peers, (n-1)/n·S reduced; and no second round. No rank
    touches slice r of another's buffer but rank r, so the pieces need no waits between them:
    one ready, one done. A rank whose call fails takes its buffer back (``quiesce``) before
    the error reaches the caller: a peer's write into it then fails instead of landing."""
    n, me, item = slots.size, slots.rank, buf.itemsize
    k = slots.begin()
    slots.expose(k, buf)
    slots.ready(k)
    try:
        slots.wait_ready(k)
        a, b = chunk_bounds(buf.size, n)[me]
        mine = buf[a:b]
        piece = max(_PIECE // item, 1)  # fetch, fold and write back cache-sized pieces
        incoming = slots.scratch(min(piece, b - a), buf.dtype)
        peers = [r for r in range(n) if r != me]
        for lo in range(0, b - a, piece):
            hi = min(lo + piece, b - a)
            here, there = mine[lo:hi], incoming[: hi - lo]
            for r in peers:
                slots.fetch(r, k, (a + lo) * item, there)
                kernel.combine(here, there)
            kernel.finalize(here, n)
            for r in peers:
                slots.put(r, k, (a + lo) * item, here)
        slots.done(k)
        slots.wait_done(k)
    except BaseException:
        # The others may still be writing into ``buf`` (a peer died, or this rank timed
        # out): none of their writes may land once the caller has its buffer back.
        slots.quiesce(k)
        raise


def broadcast(slots: Slots, buf: np.ndarray, root: int) -> None:
    """The others read the root's buffer directly. One copy per receiver."""
    k = slots.begin()
    if slots.rank == root:
        slots.expose(k, buf)
        slots.ready(k)
        slots.wait_ready(k)  # every rank's fingerprint agrees (a rank with another root raises)
        slots.done(k)
        slots.wait_done(k)
        return
    slots.ready(k)
    slots.wait_ready(k, (root,))
    slots.fetch(root, k, 0, buf)
    slots.done(k)


def all_gather(slots: Slots, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """Every rank reads every other rank's input straight into its output. (n-1)/n·S copied
    (plus this rank's own block, unless the input already is that block: in place)."""
    me = slots.rank
    k = slots.begin()
    slots.expose(k, inp)
    slots.ready(k)
    slots.wait_ready(k)
    for r, out in enumerate(outs):
        if r != me:
            slots.fetch(r, k, 0, out)
    if outs[me].ctypes.data != inp.ctypes.data:
        outs[me][...] = inp
    slots.done(k)
    slots.wait_done(k)


def reduce_scatter(slots: Slots, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """Rank j reads block j of every peer's input and folds it into its output, a
    cache-sized piece at a time (the piece of the output stays in cache across the peers)."""
    n, me, item, whole = slots.size, slots.rank, out.itemsize, out.nbytes
    k = slots.begin()
    slots.expose_blocks(k, ins)
    slots.ready(k)
    slots.wait_ready(k)
    piece = max(_PIECE // item, 1)
    incoming = slots.scratch(min(piece, out.size), out.dtype)
    own = ins[me]
    for lo in range(0, max(out.size, 1), piece):  # an empty block is still checked once
        hi = min(lo + piece, out.size)
        part, got = out[lo:hi], incoming[: hi - lo]
        part[...] = own[lo:hi]
        for r in range(n):
            if r != me:
                slots.fetch_block(r, k, me, got, lo * item, whole)
                kernel.combine(part, got)
    kernel.finalize(out, n)
    slots.done(k)
    slots.wait_done(k)


def all_to_all(slots: Slots, outs: list[np.ndarray], ins: list[np.ndarray]) -> None:
    """Rank j reads its block from every peer (block sizes travel with the addresses, so a
    disagreement is a CollectiveMismatchError, not a wrong read). One round."""
    n, me = slots.size, slots.rank
    k = slots.begin()
    slots.expose_blocks(k, ins)
    slots.ready(k)
    slots.wait_ready(k)
    for r in range(n):
        if r != me:
            slots.fetch_block(r, k, me, outs[r])
    outs[me][...] = ins[me]
    slots.done(k)
    slots.wait_done(k)


def reduce(slots: Slots, buf: np.ndarray, kernel: Kernel, root: int) -> None:
    """Rank r reduces slice r of everyone's buffer into scratch; the root then reads every
    reduced slice. The work is spread over all ranks; non-root buffers are left unchanged."""
    n, me, item = slots.size, slots.rank, buf.itemsize
    k = slots.begin()
    slots.expose(k, buf)
    slots.ready(k)
    slots.wait_ready(k)
    slices = chunk_bounds(buf.size, n)
    a, b = slices[me]
    acc, incoming = slots.scratch(b - a, buf.dtype, 1), slots.scratch(b - a, buf.dtype)
    first = True
    for r in range(n):
        if r != me:
            slots.fetch(r, k, a * item, incoming)
            if first:  # acc = own slice ∘ first peer's, one pass (this rank's buffer stays)
                kernel.combine_into(acc, buf[a:b], incoming)
                first = False
            else:
                kernel.combine(acc, incoming)
    if first:
        acc[...] = buf[a:b]
    kernel.finalize(acc, n)
    slots.expose_blocks(k, [acc])
    slots.reduced(k)
    if me != root:
        slots.done(k)
        slots.wait_done(k, (root,))  # the root reads this rank's buffer, then its scratch
        return
    slots.wait_reduced(k)  # everyone is past reading this rank's buffer: now it may change
    buf[a:b] = acc
    for r, (lo, hi) in enumerate(slices):
        if r != me:
            slots.fetch_block(r, k, 0, buf[lo:hi])
    slots.done(k)


def scatter(slots: Slots, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
    """Every rank reads its block of the root's list directly."""
    me = slots.rank
    k = slots.begin()
    if me == root:
        assert ins is not None
        slots.expose_blocks(k, ins)
        slots.ready(k)
        out[...] = ins[me]
        slots.done(k)
        slots.wait_ready(k)  # every rank's fingerprint first: one in another call never says done
        slots.wait_done(k)
        return
    slots.ready(k)
    slots.wait_ready(k, (root,))
    slots.fetch_block(root, k, me, out)
    slots.done(k)


def _large(name: str, max_ranks: int = 1 << 30) -> Rule:
    """Choose ``name`` for large messages (and groups small enough for its block list)."""
    return lambda nbytes, size, tunables: name if nbytes >= THRESHOLD and size <= max_ranks else None


ALGORITHMS = [
    Algorithm(
        "all_reduce",
        "cma_two_shot",
        21,
        all_reduce,
        "1 round; (n-1)/n·S read and (n-1)/n·S written by the kernel per rank",
        CMA,
    ),
    Algorithm("broadcast", "cma", 21, broadcast, "1 round; S copied per receiver", CMA),
    Algorithm("all_gather", "cma", 21, all_gather, "1 round; (n-1)/n·S copied", CMA),
    Algorithm("reduce_scatter", "cma", 21, reduce_scatter, "1 round; (n-1)/n·S copied and reduced", CMA),
    Algorithm("all_to_all", "cma", 21, all_to_all, "2 rounds; (n-1)/n·S copied", CMA),
    Algorithm(
        "reduce",
        "cma",
        21,
        reduce,
        "1 round; (n-1)/n·S copied and reduced per rank, then the root copies (n-1)/n·S",
        CMA,
    ),
    Algorithm("scatter", "cma", 21, scatter, "1 round; S copied per receiver", CMA),
]


def _large_unless_cores(name: str, ahead_below: Callable[[int], int], max_ranks: int = 1 << 30) -> Rule:
    """``_large``, except that with a core per rank (``host_cpus`` ≥ the group's size) the
    slots' algorithm keeps the messages below ``ahead_below(size)`` bytes (see
    ``_all_reduce_rule`` for why; the limits come from the same 16-core host)."""
    large = _large(name, max_ranks)

    def rule(nbytes: int, size: int, tunables: Any) -> str | None:
        if size <= tunables.host_cpus and nbytes < ahead_below(size):
            return None  # the slots' rule decides
        return large(nbytes, size, tunables)

    return rule


def _all_reduce_rule(nbytes: int, size: int, tunables: Any) -> str | None:
    """cma_two_shot for large messages — except, when the host has a core per rank, below
    the size where it overtakes the slots' two-shot: reading peers through the kernel costs
    more CPU than copying through the slots, which only pays once the cores are shared
    (measured, 16 cores, µs, cma_two_shot / shm_two_shot: world 2: 128 KiB 74 / 49, 1 MiB
    330 / 354, 4 MiB 561 / 1647; world 4: 128 KiB 154 / 65, 4 MiB 1684 / 1415, 16 MiB
    5316 / 6004; world 8: 128 KiB 259 / 89, 4 MiB 2163 / 1620, 16 MiB 7420 / 7046)."""
    if nbytes < THRESHOLD:
        return None
    if size <= tunables.host_cpus and nbytes < _slots_ahead_below(size):
        return None  # the slots' rule decides (shm_two_shot)
    return "cma_two_shot"


def _slots_ahead_below(size: int) -> int:
    """The size where single-copy overtakes the slots' two-shot with a core per rank."""
    return 1 << 20 if size <= 2 else (8 << 20 if size <= 4 else 32 << 20)


def _copies_ahead_below(size: int) -> int:
    """The same for all_gather (whole messages copied), measured on 16 cores (µs,
    single-copy / slots: world 2, 256 KiB 33 / 29, 1 MiB 77 / 96; world 4, 4 MiB 740 / 597,
    16 MiB 2110 / 2553; world 8, 16 MiB 5434 / 2114) and on our 2 cores at world 2 (256 KiB
    28.7 / 23.2)."""
    return 1 << 20 if size <= 2 else (16 << 20 if size <= 4 else 32 << 20)


def _broadcast_ahead_below(size: int) -> int:
    """The same for broadcast: 16 cores (µs, single-copy / slots: world 2, 256 KiB 28 / 22,
    1 MiB 54 / 91; world 4, 4 MiB 933 / 505, 16 MiB 1507 / 2161; world 8, 1 MiB 820 / 173,
    16 MiB 3441 / 2621); at world 2 from 256 KiB, where single-copy already leads on our 2
    cores (25.3 / 28.4 µs)."""
    return 256 << 10 if size <= 2 else (16 << 20 if size <= 4 else 32 << 20)


def _reductions_ahead_below(size: int) -> int:
    """The same for reduce_scatter (single-copy folds as it reads: it leads sooner), 16
    cores (µs, single-copy / slots: world 2, 256 KiB 44 / 33, 1 MiB 115 / 168; world 4,
    256 KiB 97 / 67, 1 MiB 210 / 237; world 8, 1 MiB 641 / 304, 4 MiB 788 / 865)."""
    return 1 << 20 if size <= 4 else 4 << 20


RULES = {
    ("all_reduce", CMA): _all_reduce_rule,
    ("broadcast", CMA): _large_unless_cores("cma", _broadcast_ahead_below),
    ("all_gather", CMA): _large_unless_cores("cma", _copies_ahead_below),
    ("reduce_scatter", CMA): _large_unless_cores("cma", _reductions_ahead_below, LIST_MAX),
    **{(name, CMA): _large("cma", LIST_MAX) for name in ("all_to_all", "scatter")},
}
# gather and reduce: the slot algorithms keep every rank copying at once and measured faster
# here (reduce 16 MiB, two ranks: 9.4 ms through slots, 11.7 ms single-copy); the
# single-copy reduce stays registered (ACCORD_ALGORITHM=reduce=cma) and tested.
