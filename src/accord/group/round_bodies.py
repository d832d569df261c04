"""The bodies of compiled one-round calls (``one_round.compile_call``), one per schedule.

Owns: for each collective, a factory that, given this rank, the group's size and the call's
fixed shape, returns ``make(round)``, which builds the round's body: what happens between
begin and the end of the round (``one_round.Body``). Each mirrors the one-slot case of its
schedule in ``collectives/shm.py``, ``shm_rooted.py`` and ``shm_exchange.py`` word for word
(the same slot layout, the same words in the same order, reductions in rank order), so a
compiled rank meets a rank on the long path in the same round; ``short_paths`` and
``short_exchanges`` compile a call only where that schedule takes its one-slot case. Must not know about plans, groups or the API.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..collectives.shm_exchange import size_mismatch
from ..transport.shm import DONE, FP, READY, REDUCED
from .one_round import ROOT, Body, Round

_INT64 = np.dtype(np.int64)


# ``me``, ``n``: this rank and the group's size; ``others``: the other group ranks.
def _others(me: int, n: int) -> tuple[int, ...]:
    return tuple(r for r in range(n) if r != me)


def barrier(me: int, n: int) -> Callable[[Round], Body]:
    """collectives.shm.barrier."""
    others = _others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait = rnd.mine, rnd.wait

        def body(k: int, h: int, seq: int, parity: int) -> None:
            mine[READY] = k
            wait(others, k, h, seq)
            mine[DONE] = k
        return body
    return make


def _fold(ufunc: Any, n: int) -> Callable[[list[np.ndarray], np.ndarray], None]:
    """out = ((v0 ∘ v1) ∘ v2) ∘ … in rank order, as ``Kernel.combine`` does it."""
    rest = range(2, n)

    def fold(views: list[np.ndarray], out: np.ndarray) -> None:
        ufunc(views[0], views[1], out=out)
        for r in rest:
            ufunc(out, views[r], out=out)
    return fold


def all_reduce(me: int, n: int, count: int, dtype: np.dtype, ufunc: Any,
               finalize: Callable[[np.ndarray, int], None] | None) -> Callable[[Round], Body]:
    """collectives.shm.one_shot: everyone copies in, everyone reduces every slot (the
    commonest small call: the wait's first look and the fold are written out)."""
    others, rest = _others(me, n), range(2, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        words = rnd.words

        def body(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            views[me][...] = buf
            mine[READY] = k
            at = FP + parity
            for r in others:
                theirs = words[r]
                if theirs[READY] < k or theirs[at] != h:
                    wait(others, k, h, seq)
                    break
            ufunc(views[0], views[1], out=buf)
            for r in rest:
                ufunc(buf, views[r], out=buf)
            mine[DONE] = k
            if finalize is not None:
                finalize(buf, n)
        return body
    return make


def all_reduce_by_rank0(me: int, n: int, count: int, dtype: np.dtype, ufunc: Any,
                        finalize: Callable[[np.ndarray, int], None] | None) -> Callable[[Round], Body]:
    """collectives.shm.reduce_broadcast: the others copy in; rank 0 reduces into its slot,
    says reduced; the others copy the result out."""
    others, rest = _others(me, n), range(2, n)

    def make(rnd: Round) -> Body:
        mine, wait, both, words = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype), rnd.words
        reduced_wait = rnd.reduced_wait

        def reduce_here(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            acc = views[0]
            mine[READY] = k
            wait(others, k, h, seq)
            ufunc(buf, views[1], out=acc)
            for r in rest:
                ufunc(acc, views[r], out=acc)
            if finalize is not None:
                finalize(acc, n)
            buf[...] = acc
            mine[REDUCED] = k
            mine[DONE] = k

        def contribute(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            views[me][...] = buf
            mine[READY] = k
            if words[0][REDUCED] < k:
                reduced_wait(k, seq)
            wait(ROOT, k, h, seq)  # rank 0's fingerprint agrees (it checked everyone's)
            buf[...] = views[0]
            mine[DONE] = k
        return reduce_here if me == 0 else contribute
    return make



def broadcast(me: int, n: int, root: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """collectives.shm.broadcast: the root writes its slot, the others copy it out."""
    others = _others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)
        theirs = (both[0][root], both[1][root])

        def send(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            theirs[parity][...] = buf
            mine[READY] = k
            wait(others, k, h, seq)  # every rank's fingerprint agrees (another root raises)
            mine[DONE] = k

        def receive(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            mine[READY] = k
            wait((root,), k, h, seq)
            buf[...] = theirs[parity]
            mine[DONE] = k
        return send if me == root else receive
    return make


def reduce(me: int, n: int, root: int, count: int, dtype: np.dtype, ufunc: Any,
           finalize: Callable[[np.ndarray, int], None] | None) -> Callable[[Round], Body]:
    """collectives.shm_rooted.reduce: everyone copies in, the root reduces every slot."""
    others, fold = _others(me, n), _fold(ufunc, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)

        def reduce_here(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            views = both[parity]
            views[me][...] = buf
            mine[READY] = k
            wait(others, k, h, seq)
            fold(views, buf)
            mine[DONE] = k
            if finalize is not None:
                finalize(buf, n)

        def contribute(k: int, h: int, seq: int, parity: int, buf: np.ndarray) -> None:
            both[parity][me][...] = buf
            mine[READY] = k
            mine[DONE] = k
        return reduce_here if me == root else contribute
    return make


def gather(me: int, n: int, root: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """collectives.shm_rooted.gather: everyone copies in, the root copies every slot out."""
    others = _others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)

        def collect(k: int, h: int, seq: int, parity: int, inp: np.ndarray,
                    outs: list[np.ndarray]) -> None:
            outs[me][...] = inp
            views = both[parity]
            mine[READY] = k
            wait(others, k, h, seq)
            for r in others:
                outs[r][...] = views[r]
            mine[DONE] = k

        def contribute(k: int, h: int, seq: int, parity: int, inp: np.ndarray, outs: None) -> None:
            both[parity][me][...] = inp
            mine[READY] = k
            mine[DONE] = k
        return collect if me == root else contribute
    return make


def scatter_region(slot_bytes: int, n: int, itemsize: int) -> int:
    """Elements per rank in one round of scatter (collectives.shm_rooted.scatter)."""
    return max((slot_bytes // n) // max(itemsize, 1), 1)


def scatter(me: int, n: int, root: int, count: int, dtype: np.dtype,
            region: int) -> Callable[[Round], Body]:
    """collectives.shm_rooted.scatter: the root writes a piece per rank, each copies its own.
    (The root's own piece, which nobody reads, stays out of its slot.)"""
    others = _others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(n * region * dtype.itemsize, dtype)
        pieces = [[views[root][r * region:r * region + count] for r in range(n)] for views in both]

        def send(k: int, h: int, seq: int, parity: int, out: np.ndarray, ins: list[np.ndarray]) -> None:
            out[...] = ins[me]
            slot = pieces[parity]
            for r in others:
                slot[r][...] = ins[r]
            mine[READY] = k
            wait(others, k, h, seq)  # every rank's fingerprint agrees (another root raises)
            mine[DONE] = k

        def receive(k: int, h: int, seq: int, parity: int, out: np.ndarray, ins: None) -> None:
            mine[READY] = k
            wait((root,), k, h, seq)
            out[...] = pieces[parity][me]
            mine[DONE] = k
        return send if me == root else receive
    return make


def all_gather(me: int, n: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """collectives.shm_exchange.all_gather, equal sizes: everyone copies in and every slot out.
    ``outs``: a list of n arrays, or one flat array of n·count (the tensor form)."""
    others = _others(me, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(count * dtype.itemsize, dtype)

        def body(k: int, h: int, seq: int, parity: int, inp: np.ndarray, outs: Any) -> None:
            if type(outs) is not list:
                outs = outs.reshape(n, count)
            outs[me][...] = inp
            views = both[parity]
            views[me][...] = inp
            mine[READY] = k
            wait(others, k, h, seq)
            for r in others:
                outs[r][...] = views[r]
            mine[DONE] = k
        return body
    return make


def reduce_scatter(me: int, n: int, count: int, dtype: np.dtype, ufunc: Any,
                   finalize: Callable[[np.ndarray, int], None] | None) -> Callable[[Round], Body]:
    """collectives.shm_exchange reduce_scatter, one round: block j at j·count of every slot;
    rank j reduces block j of every slot in rank order. ``ins``: a list of n arrays, or one
    flat array of n·count (the tensor form: one copy in)."""
    others, fold = _others(me, n), _fold(ufunc, n)

    def make(rnd: Round) -> Body:
        mine, wait, both = rnd.mine, rnd.wait, rnd.views(n * count * dtype.itemsize, dtype)
        blocks = [views[me].reshape(n, count) for views in both]  # this rank's slot, by block
        parts = [[view[me * count:(me + 1) * count] for view in views] for views in both]

        def body(k: int, h: int, seq: int, parity: int, out: np.ndarray, ins: Any) -> None:
            if type(ins) is list:
                slot = blocks[parity]
                for j, block in enumerate(ins):
                    slot[j] = block
            else:
                both[parity][me][...] = ins
            mine[READY] = k
            wait(others, k, h, seq)
            fold(parts[parity], out)
            mine[DONE] = k
            if finalize is not None:
                finalize(out, n)
        return body
    return make


def all_to_all_fits(n: int, count: int, itemsize: int, slot_bytes: int) -> bool:
    """Whether collectives.shm_exchange.all_to_all takes its even one-round case."""
    header = 8 * n
    return count > 0 and header + n * count * itemsize <= slot_bytes and header % itemsize == 0


def all_to_all(me: int, n: int, count: int, dtype: np.dtype) -> Callable[[Round], Body]:
    """collectives.shm_exchange all_to_all, even: the sizes (n int64) then block j for rank j
    in every slot; each rank copies its block out of every slot. ``outs``/``ins``: lists of n
    arrays, or flat arrays of n·count (the tensor form)."""
    others = _others(me, n)
    skip = n * 8 // dtype.itemsize  # the header, in elements

    def make(rnd: Round) -> Body:
        mine, wait, bound = rnd.mine, rnd.wait, rnd.bound
        sizes = rnd.views(8 * n, _INT64)
        typed = rnd.views(8 * n + n * count * dtype.itemsize, dtype)
        blocks = [views[me][skip:].reshape(n, count) for views in typed]
        parts = [[view[skip + me * count:skip + (me + 1) * count] for view in views] for views in typed]

        def body(k: int, h: int, seq: int, parity: int, outs: Any, ins: Any) -> None:
            said = sizes[parity]
            said[me][...] = count
            if type(ins) is list:
                slot = blocks[parity]
                for j, block in enumerate(ins):
                    slot[j] = block
            else:
                typed[parity][me][skip:] = ins
                ins = ins.reshape(n, count)
                outs = outs.reshape(n, count)
            mine[READY] = k
            wait(others, k, h, seq)
            part = parts[parity]
            wrong = False
            for r in others:
                if said[r][me] != count:
                    wrong = True
                else:
                    outs[r][...] = part[r]
            outs[me][...] = ins[me]
            error = size_mismatch(bound(seq), [row.tolist() for row in said], outs) if wrong else None
            mine[DONE] = k
            if error is not None:
                raise error
        return body
    return make
