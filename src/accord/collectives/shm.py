"""Shared-memory algorithms: all_reduce (one-shot, reduce-broadcast, two-shot), broadcast, barrier.

Owns: the schedules over ``Slots``. Buffers larger than a slot go in chunks, one round per
chunk; consecutive rounds use alternate slots, so a rank may fill the next chunk while the
others still read the last one. Every rank combines in rank order, so results are
bit-identical everywhere. Beside each schedule with a one-round case, its compiled form
(``<schedule>_round``, over ``slots.Round``): the same round, the same words in the same
order, for a call signature known to fit one slot (``group.one_round`` runs it). Must not
know about segments or sockets: only ``Slots`` and ``Round``.

Costs below: S bytes per rank, n ranks, traffic in bytes moved through memory per rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..reduce_ops import Kernel
from .algorithm import SHARED_MEMORY, Algorithm
from .patterns import chunk_bounds
from .slots import ROOT, Body, Finalize, Round, Slots, others, typed


def chunks(slots: Slots, buf: np.ndarray) -> Sequence[tuple[int, int]]:
    """The (start, stop) element ranges of ``buf`` that fit one slot each."""
    if buf.nbytes <= slots.slot_bytes:
        return ((0, buf.size),) if buf.size else ()
    per = max(slots.slot_bytes // max(buf.itemsize, 1), 1)
    return [(start, min(start + per, buf.size)) for start in range(0, buf.size, per)]


def one_shot(slots: Slots, buf: np.ndarray, kernel: Kernel) -> None:
    """all_reduce: copy in, then every rank reduces every slot. One sync per chunk;
    traffic ≈ (n+3)·S — the choice for small S (and for two ranks)."""
    n, me, dtype, combine = slots.size, slots.rank, buf.dtype, kernel.combine
    whole = buf.nbytes <= slots.slot_bytes  # the usual case: one round, no slicing
    for start, stop in ((0, buf.size),) if whole and buf.size else chunks(slots, buf):
        k = slots.begin()
        views = slots.views(k, (stop - start) * buf.itemsize, dtype)
        out = buf if whole else buf[start:stop]
        views[me][...] = out
        slots.ready(k)
        slots.wait_ready(k)
        if me != 0:
            out[...] = views[0]
        for r in range(1, n):
            combine(out, views[r])
        slots.done(k)
    if kernel.needs_finalize:
        kernel.finalize(buf, n)


def one_shot_round(
    me: int, n: int, count: int, dtype: np.dtype, ufunc: Any, finalize: Finalize
) -> Callable[[Round], Body]:
    """``one_shot``, one round, compiled: everyone copies in, everyone reduces every slot (the
    commonest small call: the wait's first look and the fold are written out)."""
    waited, rest = others(me, n), range(2, n)

    def make(rnd: Round) -> Body:
        mine, words, wait, both = rnd.mine, rnd.words, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        ready, done, fp = rnd.READY, rnd.DONE, rnd.FP

        def body(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            views[me][...] = buf
            mine[ready] = k
            at = fp + parity
            for r in waited:
                theirs = words[r]
                if theirs[ready] < k or theirs[at] != h:
                    wait(waited, k, h, seq)
                    break
            ufunc(views[0], views[1], out=buf)
            for r in rest:
                ufunc(buf, views[r], out=buf)
            mine[done] = k
            if finalize is not None:
                finalize(buf, n)

        return body

    return make


def reduce_broadcast(slots: Slots, buf: np.ndarray, kernel: Kernel) -> None:
    """all_reduce: the others copy in; rank 0 reduces every slot in rank order into its own
    slot, says ``reduced``; the others copy the result out. Two syncs per chunk, but only
    rank 0 reduces: the choice for small S on 3+ ranks, where ranks outnumber cores most
    often (one-shot's n·(n−1) folds cost more than the second sync, and its ranks finish
    out of step, half of its calls taking twice the mean)."""
    n, me, dtype = slots.size, slots.rank, buf.dtype
    for start, stop in chunks(slots, buf):
        nbytes = (stop - start) * buf.itemsize
        k = slots.begin()
        views = slots.views(k, nbytes, dtype)
        out = buf[start:stop]
        if me != 0:
            views[me][...] = out
            slots.ready(k)
            # rank 0's fingerprint first (it checks everyone's): a rank 0 in another call
            # (a root that left its round: ``Slots.leave``) never says reduced
            slots.wait_ready(k, (0,))
            slots.wait_reduced(k, (0,))
            out[...] = views[0]
        else:
            slots.ready(k)
            slots.wait_ready(k)
            acc = views[0]
            kernel.combine_into(acc, out, views[1])
            for r in range(2, n):
                kernel.combine(acc, views[r])
            kernel.finalize(acc, n)
            out[...] = acc
            slots.reduced(k)
        slots.done(k)


def reduce_broadcast_round(
    me: int, n: int, count: int, dtype: np.dtype, ufunc: Any, finalize: Finalize
) -> Callable[[Round], Body]:
    """``reduce_broadcast``, one round, compiled: the others copy in; rank 0 reduces into its
    slot, says reduced; the others copy the result out."""
    waited, rest = others(me, n), range(2, n)

    def make(rnd: Round) -> Body:
        mine, words, wait, both = rnd.mine, rnd.words, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        ready, done, reduced, reduced_wait = rnd.READY, rnd.DONE, rnd.REDUCED, rnd.reduced_wait

        def reduce_here(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            acc = views[0]
            mine[ready] = k
            wait(waited, k, h, seq)
            ufunc(buf, views[1], out=acc)
            for r in rest:
                ufunc(acc, views[r], out=acc)
            if finalize is not None:
                finalize(acc, n)
            buf[...] = acc
            mine[reduced] = k
            mine[done] = k

        def contribute(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            views[me][...] = buf
            mine[ready] = k
            wait(ROOT, k, h, seq)  # rank 0's fingerprint first (as ``reduce_broadcast``'s)
            if words[0][reduced] < k:
                reduced_wait(k, seq)
            buf[...] = views[0]
            mine[done] = k

        return reduce_here if me == 0 else contribute

    return make


def two_shot(slots: Slots, buf: np.ndarray, kernel: Kernel) -> None:
    """all_reduce: copy in; rank r reduces slice r of every slot into its own slot; then
    everyone copies the reduced slices out. Two syncs per chunk; traffic ≈ 5·S."""
    n, me, dtype = slots.size, slots.rank, buf.dtype
    for start, stop in chunks(slots, buf):
        nbytes = (stop - start) * buf.itemsize
        k = slots.begin()
        chunk = buf[start:stop]
        mine = typed(slots.slot(me, k), nbytes, dtype)
        mine[...] = chunk
        slots.ready(k)
        slots.wait_ready(k)
        slices = chunk_bounds(stop - start, n)
        a, b = slices[me]
        acc = slots.scratch(b - a, dtype)
        acc[...] = typed(slots.slot(0, k), nbytes, dtype)[a:b]
        for r in range(1, n):
            kernel.combine(acc, typed(slots.slot(r, k), nbytes, dtype)[a:b])
        kernel.finalize(acc, n)
        mine[a:b] = acc  # only this rank reads slice `me` of its own slot in phase one
        slots.reduced(k)
        slots.wait_reduced(k)
        for r, (a, b) in enumerate(slices):
            chunk[a:b] = typed(slots.slot(r, k), nbytes, dtype)[a:b]
        slots.done(k)


def broadcast(slots: Slots, buf: np.ndarray, root: int) -> None:
    """The root copies each chunk into its slot; the others copy it out. Traffic ≈ 2·S."""
    me, dtype = slots.rank, buf.dtype
    if 0 < buf.nbytes <= slots.slot_bytes:  # the usual small case: one round, cached views
        k = slots.begin()
        view = slots.views(k, buf.nbytes, dtype)[root]
        if me == root:
            view[...] = buf
            slots.ready(k)
            slots.leave(k)  # it reads nothing: its next round checks the others' fingerprints
            return
        slots.ready(k)
        slots.wait_ready(k, (root,))
        buf[...] = view
        slots.done(k)
        return
    for start, stop in chunks(slots, buf):
        nbytes = (stop - start) * buf.itemsize
        k = slots.begin()
        if me == root:
            typed(slots.slot(me, k), nbytes, dtype)[...] = buf[start:stop]
            slots.ready(k)
            slots.wait_ready(k)  # every rank's fingerprint agrees (a rank with another root raises)
        else:
            slots.ready(k)
            slots.wait_ready(k, (root,))
            buf[start:stop] = typed(slots.slot(root, k), nbytes, dtype)
        slots.done(k)


def broadcast_round(me: int, n: int, root: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """``broadcast``'s one-round case, compiled: the root writes its slot, the others copy it out."""

    def make(rnd: Round) -> Body:
        mine, wait, leave, both = rnd.mine, rnd.wait, rnd.leave, rnd.views(count * dtype.itemsize, dtype)
        ready, done = rnd.READY, rnd.DONE
        theirs = (both[0][root], both[1][root])

        def send(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            theirs[parity][...] = buf
            mine[ready] = k
            leave(k, h, seq)  # (as ``broadcast``'s root: checked at its next round)

        send.posts_only = True  # type: ignore[attr-defined]  # (one_round.post_first)

        def receive(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            mine[ready] = k
            wait((root,), k, h, seq)
            buf[...] = theirs[parity]
            mine[done] = k

        return send if me == root else receive

    return make


def barrier(slots: Slots) -> None:
    """Everyone says ready and waits for everyone: one round, no data."""
    k = slots.begin()
    slots.ready(k)
    slots.wait_ready(k)
    slots.done(k)


def barrier_round(me: int, n: int) -> Callable[[Round], Body]:
    """``barrier``, compiled."""
    waited = others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, ready, done = rnd.mine, rnd.wait, rnd.READY, rnd.DONE

        def body(k: int, h: int, seq: int, parity: int) -> None:
            mine[ready] = k
            wait(waited, k, h, seq)
            mine[done] = k

        return body

    return make


def _all_reduce_rule(nbytes: int, size: int, tunables: Any) -> str:
    # one-shot moves (n+3)·S but syncs once; two-shot ≈5·S with two syncs (research §9.2);
    # on 3+ ranks a small S is reduced by rank 0 alone (reduce_broadcast). Where the ranks
    # share cores the syncs dominate (the limits below); with a core per rank the copies do,
    # and two-shot leads from 16 KiB at 3+ ranks and from 64 KiB at 2 (measured, 16 cores,
    # µs, one-shot / two-shot: world 4, 64 KiB 51.9 / 32.2, 256 KiB 190 / 79; world 8,
    # 64 KiB 105 / 67, 256 KiB 398 / 155; 16 KiB: reduce_broadcast or one-shot lead).
    if size >= 3 and nbytes <= _REDUCE_BROADCAST_MAX:
        return "shm_reduce_bcast"
    if size <= tunables.host_cpus:
        limit = _ONE_SHOT_WITH_CORES if size <= 2 else _REDUCE_BROADCAST_MAX
    else:
        limit = 1 << 62 if size <= 2 else (256 << 10 if size <= 4 else 64 << 10)
    return "shm_one_shot" if nbytes <= limit else "shm_two_shot"


_ONE_SHOT_WITH_CORES = 64 << 10


_REDUCE_BROADCAST_MAX = 16 << 10


ALGORITHMS = [
    Algorithm(
        "all_reduce",
        "shm_one_shot",
        11,
        one_shot,
        "1 sync per chunk; (n+3)·S through memory: small S, or two ranks",
        SHARED_MEMORY,
    ),
    Algorithm(
        "all_reduce",
        "shm_reduce_bcast",
        13,
        reduce_broadcast,
        "2 syncs per chunk; rank 0 reduces, the others copy out: small S on 3+ ranks",
        SHARED_MEMORY,
    ),
    Algorithm(
        "all_reduce",
        "shm_two_shot",
        12,
        two_shot,
        "2 syncs per chunk; ≈5·S through memory: large S on 3+ ranks",
        SHARED_MEMORY,
    ),
    Algorithm("broadcast", "shm", 11, broadcast, "1 sync per chunk; 2·S", SHARED_MEMORY),
    Algorithm("barrier", "shm", 11, barrier, "one round of flags", SHARED_MEMORY),
]
RULES = {
    ("all_reduce", SHARED_MEMORY): _all_reduce_rule,
    ("broadcast", SHARED_MEMORY): lambda nbytes, size, t: "shm",
    ("barrier", SHARED_MEMORY): lambda nbytes, size, t: "shm",
}
