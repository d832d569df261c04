"""Shared-memory reduce, gather and scatter: one rank reads (or writes) for everyone.

Owns: the three rooted schedules over ``Slots``, chunked one round per slot's worth. The root
reads the others' slots (reduce, gather) or the others read the root's (scatter). Every rank
runs the same rounds; they depend only on sizes all ranks agree on (checked by the
fingerprint). Beside each schedule, its one-round case compiled (``<schedule>_round``, over
``slots.Round``; see ``shm``). Must not know about segments or sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..reduce_ops import Kernel
from .algorithm import SHARED_MEMORY, Algorithm
from .shm import chunks
from .slots import Body, Finalize, Round, Slots, fold, others, typed


def reduce(slots: Slots, buf: np.ndarray, kernel: Kernel, root: int) -> None:
    """Everyone copies a chunk in; the root reduces every slot in rank order into its buffer.
    One sync per chunk; the others' buffers are left as they were. Traffic: root (n+2)·S."""
    n, me, dtype = slots.size, slots.rank, buf.dtype
    if 0 < buf.nbytes <= slots.slot_bytes:  # the usual small case: one round, cached views
        k = slots.begin()
        views = slots.views(k, buf.nbytes, dtype)
        views[me][...] = buf
        slots.ready(k)
        if me == root:
            slots.wait_ready(k)
            buf[...] = views[0]
            for r in range(1, n):
                kernel.combine(buf, views[r])
        slots.done(k)
        if me == root:
            kernel.finalize(buf, n)
        return
    for start, stop in chunks(slots, buf):
        nbytes = (stop - start) * buf.itemsize
        k = slots.begin()
        typed(slots.slot(me, k), nbytes, dtype)[...] = buf[start:stop]
        slots.ready(k)
        if me == root:
            slots.wait_ready(k)
            out = buf[start:stop]
            out[...] = typed(slots.slot(0, k), nbytes, dtype)
            for r in range(1, n):
                kernel.combine(out, typed(slots.slot(r, k), nbytes, dtype))
        slots.done(k)
    if me == root:
        kernel.finalize(buf, n)


def reduce_round(
    me: int, n: int, root: int, count: int, dtype: np.dtype, ufunc: Any, finalize: Finalize
) -> Callable[[Round], Body]:
    """``reduce``'s one-round case, compiled: everyone copies in, the root reduces every slot."""
    waited, combine = others(me, n), fold(ufunc, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        ready, done = rnd.READY, rnd.DONE

        def reduce_here(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            views[me][...] = buf
            mine[ready] = k
            wait(waited, k, h, seq)
            combine(views, buf)
            mine[done] = k
            if finalize is not None:
                finalize(buf, n)

        def contribute(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            both[parity][me][...] = buf
            mine[ready] = k
            mine[done] = k

        return reduce_here if me == root else contribute

    return make


def gather(slots: Slots, inp: np.ndarray, outs: list[np.ndarray] | None, root: int) -> None:
    """Everyone copies a chunk of its input in; the root copies every slot out. 2·S per rank."""
    me, dtype = slots.rank, inp.dtype
    if outs is not None:
        outs[me][...] = inp
    if 0 < inp.nbytes <= slots.slot_bytes:  # the usual small case: one round, cached views
        k = slots.begin()
        views = slots.views(k, inp.nbytes, dtype)
        if me != root:
            views[me][...] = inp
        slots.ready(k)
        if me == root:
            assert outs is not None
            slots.wait_ready(k)
            for r, out in enumerate(outs):
                if r != me:
                    out[...] = views[r]
        slots.done(k)
        return
    for start, stop in chunks(slots, inp):
        nbytes = (stop - start) * inp.itemsize
        k = slots.begin()
        if me != root:
            typed(slots.slot(me, k), nbytes, dtype)[...] = inp[start:stop]
        slots.ready(k)
        if me == root:
            assert outs is not None
            slots.wait_ready(k)
            for r, out in enumerate(outs):
                if r != me:
                    out[start:stop] = typed(slots.slot(r, k), nbytes, dtype)
        slots.done(k)


def gather_round(me: int, n: int, root: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """``gather``'s one-round case, compiled: the others copy in, the root copies every slot out."""
    waited = others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        ready, done = rnd.READY, rnd.DONE

        def collect(k: int, h: int, seq: int, parity: int, inp: np.ndarray, outs: list[np.ndarray]) -> None:
            outs[me][...] = inp
            views = both[parity]
            mine[ready] = k
            wait(waited, k, h, seq)
            for r in waited:
                outs[r][...] = views[r]
            mine[done] = k

        def contribute(k: int, h: int, seq: int, parity: int, inp: np.ndarray, outs: None) -> None:
            both[parity][me][...] = inp
            mine[ready] = k
            mine[done] = k

        return collect if me == root else contribute

    return make


def scatter_region(slot_bytes: int, n: int, itemsize: int) -> int:
    """Elements per rank in one round of ``scatter``."""
    return max((slot_bytes // n) // max(itemsize, 1), 1)


def scatter(slots: Slots, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
    """The root fills its slot with one piece per rank; each rank copies its piece out."""
    n, me, dtype = slots.size, slots.rank, out.dtype
    region = scatter_region(slots.slot_bytes, n, out.itemsize)
    if ins is not None:
        out[...] = ins[me]
    if 0 < out.size <= region:  # the usual small case: one round, one cached view of the root's slot
        k = slots.begin()
        pieces = slots.views(k, n * region * out.itemsize, dtype)[root]
        if me == root:
            assert ins is not None
            for r in range(n):
                pieces[r * region : r * region + out.size] = ins[r]
            slots.ready(k)
            slots.leave(k)  # it reads nothing: its next round checks the others' fingerprints
            return
        slots.ready(k)
        slots.wait_ready(k, (root,))
        out[...] = pieces[me * region : me * region + out.size]
        slots.done(k)
        return
    for start in range(0, out.size, region):
        stop = min(start + region, out.size)
        k = slots.begin()
        raw = slots.slot(root, k)
        width = region * out.itemsize
        if me == root:
            assert ins is not None
            for r in range(n):
                raw[r * width : r * width + (stop - start) * out.itemsize].view(dtype)[...] = ins[r][
                    start:stop
                ]
            slots.ready(k)
            slots.wait_ready(k)  # every rank's fingerprint agrees (a rank with another root raises)
        else:
            slots.ready(k)
            slots.wait_ready(k, (root,))
            out[start:stop] = raw[me * width : me * width + (stop - start) * out.itemsize].view(dtype)
        slots.done(k)


def scatter_round(
    me: int, n: int, root: int, count: int, dtype: np.dtype, region: int
) -> Callable[[Round], Body]:
    """``scatter``'s one-round case (``0 < count <= region``: ``scatter_region``), compiled:
    the root writes a piece per rank, each copies its own. (The root's own piece, which
    nobody reads, stays out of its slot.)"""
    waited = others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, leave = rnd.mine, rnd.wait, rnd.leave
        both = rnd.views(n * region * dtype.itemsize, dtype)
        ready, done = rnd.READY, rnd.DONE
        pieces = [[views[root][r * region : r * region + count] for r in range(n)] for views in both]

        def send(k: int, h: int, seq: int, parity: int, out: np.ndarray, ins: list[np.ndarray]) -> None:
            out[...] = ins[me]  # (first, as ``scatter`` does: the same result if they overlap)
            slot = pieces[parity]
            for r in waited:
                slot[r][...] = ins[r]
            mine[ready] = k
            leave(k, h, seq)  # (as ``scatter``'s root: checked at its next round)

        send.posts_only = True  # type: ignore[attr-defined]  # (one_round.post_first)

        def receive(k: int, h: int, seq: int, parity: int, out: np.ndarray, ins: None) -> None:
            mine[ready] = k
            wait((root,), k, h, seq)
            out[...] = pieces[parity][me]
            mine[done] = k

        return send if me == root else receive

    return make


ALGORITHMS = [
    Algorithm("reduce", "shm", 11, reduce, "1 sync per chunk; root reads n·S", SHARED_MEMORY),
    Algorithm("gather", "shm", 11, gather, "1 sync per chunk; 2·S per rank", SHARED_MEMORY),
    Algorithm("scatter", "shm", 11, scatter, "1 sync per piece; 2·S per rank", SHARED_MEMORY),
]
RULES = {
    ("reduce", SHARED_MEMORY): lambda nbytes, size, t: "shm",
    ("gather", SHARED_MEMORY): lambda nbytes, size, t: "shm",
    ("scatter", SHARED_MEMORY): lambda nbytes, size, t: "shm",
}
