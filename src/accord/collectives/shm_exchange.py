"""Shared-memory all_gather, reduce_scatter and all_to_all: every rank reads every slot.

Owns: the three schedules over ``Slots``. Sizes may differ per rank. A rank's contribution
goes through its slot a slot's worth per round: all_gather sends its input; reduce_scatter
and all_to_all send the concatenation of their per-destination blocks, and each reader picks
out the part meant for it. all_to_all first exchanges block sizes (one extra round), because
no rank knows what the others send each other; a disagreement with what a receiver expects is
a CollectiveMismatchError. Where the group may read its members' memory and the sizes show
more than the first round holds, every rank then reads its blocks straight from the peers'
inputs instead (the list form and the uneven tensor form, whose size is not known up front,
would otherwise copy everything twice). Beside each schedule's one-round case (equal sizes
that fit one slot), that case compiled (``<schedule>_round``, over ``slots.Round``; see
``shm``). Must not know about segments or sockets.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CollectiveMismatchError
from ..reduce_ops import Kernel
from .algorithm import SHARED_MEMORY, Algorithm
from .shm_cma import LIST_MAX, THRESHOLD
from .slots import Body, Finalize, Round, Slots, fold, others, typed

_INT64 = np.dtype(np.int64)


def _offsets(sizes: list[int]) -> list[int]:
    return [0, *itertools.accumulate(sizes)]


def _write_range(
    raw: np.ndarray, blocks: list[np.ndarray], offsets: list[int], start: int, stop: int
) -> None:
    """Copy elements [start, stop) of the concatenation of ``blocks`` into the slot ``raw``."""
    for block, first in zip(blocks, offsets):
        a, b = max(first, start), min(first + block.size, stop)
        if a < b:
            item = block.itemsize
            raw[(a - start) * item : (b - start) * item].view(block.dtype)[...] = block[a - first : b - first]


def all_gather(slots: Slots, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """Each round every rank puts the next slot's worth of its input in its slot; everyone
    copies every other slot out. One sync per round; 2·S through memory per rank."""
    me, dtype, item = slots.rank, inp.dtype, inp.itemsize
    outs[me][...] = inp
    if 0 < inp.nbytes <= slots.slot_bytes and all(out.size == inp.size for out in outs):
        k = slots.begin()  # the usual small case: one round, cached views, no slicing
        views = slots.views(k, inp.nbytes, dtype)
        views[me][...] = inp
        slots.ready(k)
        slots.wait_ready(k)
        for r, out in enumerate(outs):
            if r != me:
                out[...] = views[r]
        slots.done(k)
        return
    per = max(slots.slot_bytes // max(item, 1), 1)
    longest = max(out.size for out in outs)
    for start in range(0, longest, per):
        k = slots.begin()
        mine = inp[start : start + per]
        if mine.size:
            typed(slots.slot(me, k), mine.nbytes, dtype)[...] = mine
        slots.ready(k)
        slots.wait_ready(k)
        for r, out in enumerate(outs):
            piece = out[start : start + per]
            if r != me and piece.size:
                piece[...] = typed(slots.slot(r, k), piece.nbytes, dtype)
        slots.done(k)


def all_gather_round(me: int, n: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """``all_gather``'s one-round case (equal sizes), compiled: everyone copies in and every
    slot out. ``outs``: a list of n arrays, or one flat array of n·count (the tensor form)."""
    waited = others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        ready, done = rnd.READY, rnd.DONE

        def body(k: int, h: int, seq: int, parity: int, inp: np.ndarray, outs: Any) -> None:
            if type(outs) is not list:
                outs = outs.reshape(n, count)
            outs[me][...] = inp
            views = both[parity]
            views[me][...] = inp
            mine[ready] = k
            wait(waited, k, h, seq)
            for r in waited:
                outs[r][...] = views[r]
            mine[done] = k

        return body

    return make


def reduce_scatter(slots: Slots, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """Every rank puts its blocks (concatenated) through its slot; rank j reduces block j of
    every slot, in rank order. One sync per round; ≈3·S through memory — never a full
    all_reduce."""
    n, me, dtype, item = slots.size, slots.rank, out.dtype, out.itemsize
    if 0 < out.size and n * out.nbytes <= slots.slot_bytes and all(b.size == out.size for b in ins):
        _reduce_scatter_one_round(slots, out, ins, kernel)  # the usual small case
        return
    offsets = _offsets([block.size for block in ins])
    lo, hi = offsets[me], offsets[me + 1]
    per = max(slots.slot_bytes // max(item, 1), 1)
    for start in range(0, offsets[-1], per):
        stop = min(start + per, offsets[-1])
        k = slots.begin()
        _write_range(slots.slot(me, k), ins, offsets, start, stop)
        slots.ready(k)
        slots.wait_ready(k)
        a, b = max(lo, start), min(hi, stop)
        if a < b:
            dst = out[a - lo : b - lo]
            dst[...] = slots.slot(0, k)[(a - start) * item : (b - start) * item].view(dtype)
            for r in range(1, n):
                kernel.combine(dst, slots.slot(r, k)[(a - start) * item : (b - start) * item].view(dtype))
        slots.done(k)
    kernel.finalize(out, n)


def _reduce_scatter_one_round(slots: Slots, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """Equal blocks that fit one slot together: block j at j·B of every slot, cached views."""
    n, me, count = slots.size, slots.rank, out.size
    k = slots.begin()
    views = slots.views(k, n * out.nbytes, out.dtype)
    mine = views[me]
    for j, block in enumerate(ins):
        mine[j * count : (j + 1) * count] = block
    lo, hi = me * count, (me + 1) * count
    slots.ready(k)
    slots.wait_ready(k)
    out[...] = views[0][lo:hi]
    for r in range(1, n):
        kernel.combine(out, views[r][lo:hi])
    slots.done(k)
    kernel.finalize(out, n)


def reduce_scatter_round(
    me: int, n: int, count: int, dtype: np.dtype, ufunc: Any, finalize: Finalize
) -> Callable[[Round], Body]:
    """``_reduce_scatter_one_round``, compiled: block j at j·count of every slot; rank j
    reduces block j of every slot in rank order. ``ins``: a list of n arrays, or one flat
    array of n·count (the tensor form: one copy in)."""
    waited, combine = others(me, n), fold(ufunc, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(n * count * dtype.itemsize, dtype)
        ready, done = rnd.READY, rnd.DONE
        blocks = [views[me].reshape(n, count) for views in both]  # this rank's slot, by block
        parts = [[view[me * count : (me + 1) * count] for view in views] for views in both]

        def body(k: int, h: int, seq: int, parity: int, out: np.ndarray, ins: Any) -> None:
            if type(ins) is list:
                slot = blocks[parity]
                for j, block in enumerate(ins):
                    slot[j] = block
            else:
                both[parity][me][...] = ins
            mine[ready] = k
            wait(waited, k, h, seq)
            combine(parts[parity], out)
            mine[done] = k
            if finalize is not None:
                finalize(out, n)

        return body

    return make


def size_mismatch(
    slots: Slots, matrix: list[list[int]], outs: list[np.ndarray]
) -> CollectiveMismatchError | None:
    """The error of an all_to_all whose senders' sizes (``matrix[r][me]``) disagree with this
    rank's outputs, naming the first rank that disagrees (None: they agree)."""
    me = slots.rank
    for r, out in enumerate(outs):
        if matrix[r][me] != out.size:
            return CollectiveMismatchError(
                f"{slots}: rank {r} sends {matrix[r][me]} elements to this rank, whose output "
                f"tensor for rank {r} holds {out.size}. Do input and output split sizes agree "
                f"across ranks?"
            )
    return None


def all_to_all(slots: Slots, outs: list[np.ndarray], ins: list[np.ndarray]) -> None:
    """Every rank puts how much it sends to each rank, then its blocks (concatenated), through
    its slot; every rank reads the sizes and copies its block out of every slot. The first
    round carries the sizes and as much data as fits after them (a small call is one round);
    the rest, if any, goes a slot's worth per round. 2·S through memory per rank."""
    n, me = slots.size, slots.rank
    item = max(outs[0].itemsize if outs else 1, 1)
    dtype = ins[0].dtype if ins else np.dtype(np.uint8)
    header = 8 * n
    m = ins[me].size if ins else 0
    if (
        all_to_all_fits(n, m, item, slots.slot_bytes)
        and all(b.size == m for b in ins)
        and all(o.size == m for o in outs)
    ):
        _all_to_all_even(slots, outs, ins, m, dtype)  # the usual small case
        return
    first_cap = max((slots.slot_bytes - header) // item, 0)  # elements in round 1
    mine = [block.size for block in ins]
    mine_offsets = _offsets(mine)
    k = slots.begin()
    readable = slots.can_fetch and n <= LIST_MAX

    def direct(count: int) -> bool:  # elements past the first round: read them straight
        return readable and count > first_cap and count * item >= THRESHOLD

    if readable:  # in case the sizes (known to all after this round) call for direct reads
        slots.expose_blocks(k, ins)
    raw = slots.slot(me, k)
    raw[:header].view(np.int64)[...] = mine
    total = mine_offsets[-1]
    if not direct(total):  # else it surely goes direct: the slot's copy would be wasted
        _write_range(raw[header:], ins, mine_offsets, 0, min(first_cap, total))
    slots.ready(k)
    slots.wait_ready(k)
    matrix = [slots.slot(r, k)[:header].view(np.int64).tolist() for r in range(n)]
    error = size_mismatch(slots, matrix, outs)
    offsets = [_offsets(row) for row in matrix]
    if direct(max(row[-1] for row in offsets)):
        _read_blocks(slots, k, outs, ins, error)  # every rank sees the same matrix: all do
        return
    if error is None:
        outs[me][...] = ins[me]
        _copy_out(slots, k, outs, offsets, matrix, 0, first_cap, header, item, dtype)
    slots.done(k)
    if error is not None:
        raise error
    per = max(slots.slot_bytes // item, 1)
    for start in range(first_cap, max(row[-1] for row in offsets), per):
        stop = start + per
        k = slots.begin()
        _write_range(slots.slot(me, k), ins, mine_offsets, start, min(stop, mine_offsets[-1]))
        slots.ready(k)
        slots.wait_ready(k)
        _copy_out(slots, k, outs, offsets, matrix, start, stop, 0, item, dtype)
        slots.done(k)


def _read_blocks(
    slots: Slots, k: int, outs: list[np.ndarray], ins: list[np.ndarray], error: CollectiveMismatchError | None
) -> None:
    """The rest of an all_to_all too large for the first round, where the group may read its
    members' memory: each rank reads its block straight from every peer's input (one copy),
    as the single-copy all_to_all does, and keeps its own blocks until everyone has read."""
    me = slots.rank
    if error is None:
        for r, out in enumerate(outs):
            if r != me:
                slots.fetch_block(r, k, me, out)
        outs[me][...] = ins[me]
    slots.done(k)
    slots.wait_done(k)
    if error is not None:
        raise error


def _all_to_all_even(
    slots: Slots, outs: list[np.ndarray], ins: list[np.ndarray], m: int, dtype: np.dtype
) -> None:
    """all_to_all of ``m`` elements to and from every rank, all in one round, through cached
    views: the sizes still go first (a rank that sends another size is a mismatch), but
    there are no offsets to work out."""
    n, me = slots.size, slots.rank
    h = n * 8 // dtype.itemsize  # the header, in elements
    k = slots.begin()
    sizes = slots.views(k, 8 * n, _INT64)
    typed = slots.views(k, 8 * n + n * m * dtype.itemsize, dtype)
    sizes[me][...] = m
    mine = typed[me]
    for j, part in enumerate(ins):
        mine[h + j * m : h + (j + 1) * m] = part
    slots.ready(k)
    slots.wait_ready(k)
    lo, hi = h + me * m, h + (me + 1) * m
    wrong = False
    for r in range(n):
        if sizes[r][me] != m:
            wrong = True
        elif r != me:
            outs[r][...] = typed[r][lo:hi]
    outs[me][...] = ins[me]
    error = size_mismatch(slots, [row.tolist() for row in sizes], outs) if wrong else None
    slots.done(k)
    if error is not None:
        raise error


def all_to_all_fits(n: int, count: int, itemsize: int, slot_bytes: int) -> bool:
    """Whether ``all_to_all`` of ``count`` elements to and from every rank takes its even
    one-round case (``_all_to_all_even``): the header of sizes, then n blocks, in one slot."""
    header = 8 * n
    return count > 0 and header + n * count * itemsize <= slot_bytes and header % itemsize == 0


def all_to_all_round(me: int, n: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """``_all_to_all_even``, compiled: the sizes (n int64) then block j for rank j in every
    slot; each rank copies its block out of every slot. ``outs``/``ins``: lists of n arrays,
    or flat arrays of n·count (the tensor form)."""
    waited = others(me, n)
    skip = n * 8 // dtype.itemsize  # the header, in elements

    def make(rnd: Round) -> Body:
        mine, wait, bound, ready, done = rnd.mine, rnd.wait, rnd.bound, rnd.READY, rnd.DONE
        sizes = rnd.views(8 * n, _INT64)
        data = rnd.views(8 * n + n * count * dtype.itemsize, dtype)
        blocks = [views[me][skip:].reshape(n, count) for views in data]
        parts = [[view[skip + me * count : skip + (me + 1) * count] for view in views] for views in data]

        def body(k: int, h: int, seq: int, parity: int, outs: Any, ins: Any) -> None:
            said = sizes[parity]
            said[me][...] = count
            if type(ins) is list:
                slot = blocks[parity]
                for j, block in enumerate(ins):
                    slot[j] = block
            else:
                data[parity][me][skip:] = ins
                ins = ins.reshape(n, count)
                outs = outs.reshape(n, count)
            mine[ready] = k
            wait(waited, k, h, seq)
            part = parts[parity]
            wrong = False
            for r in waited:
                if said[r][me] != count:
                    wrong = True
                else:
                    outs[r][...] = part[r]
            outs[me][...] = ins[me]
            error = size_mismatch(bound(seq), [row.tolist() for row in said], outs) if wrong else None
            mine[done] = k
            if error is not None:
                raise error

        return body

    return make


def _copy_out(
    slots: Slots,
    k: int,
    outs: list[np.ndarray],
    offsets: list[list[int]],
    matrix: list[list[int]],
    start: int,
    stop: int,
    skip: int,
    item: int,
    dtype: np.dtype,
) -> None:
    """Copy the part of each rank's block for this rank that lies in elements [start, stop)
    of its concatenation, which round ``k``'s slot holds from byte ``skip`` on."""
    me = slots.rank
    for r in range(slots.size):
        first = offsets[r][me]
        a, b = max(first, start), min(first + matrix[r][me], stop)
        if r != me and a < b:
            raw = slots.slot(r, k)
            outs[r][a - first : b - first] = raw[skip + (a - start) * item : skip + (b - start) * item].view(
                dtype
            )


ALGORITHMS = [
    Algorithm("all_gather", "shm", 11, all_gather, "1 sync per slot's worth; 2·S", SHARED_MEMORY),
    Algorithm("reduce_scatter", "shm", 11, reduce_scatter, "1 sync per slot's worth; ≈3·S", SHARED_MEMORY),
    Algorithm(
        "all_to_all",
        "shm",
        11,
        all_to_all,
        "1 sync per slot's worth (sizes in the first); 2·S",
        SHARED_MEMORY,
    ),
]
RULES = {
    ("all_gather", SHARED_MEMORY): lambda nbytes, size, t: "shm",
    ("reduce_scatter", SHARED_MEMORY): lambda nbytes, size, t: "shm",
    ("all_to_all", SHARED_MEMORY): lambda nbytes, size, t: "shm",
}
