"""Scenarios for backend "mpi"'s list forms where the arrays lie (``engines/mpi/layouts``):
all_gather, reduce_scatter and all_to_all on lists of separate arrays, in every dtype, in
layouts that catch a wrong byte offset — separate arrays, views of one buffer in reversed
address order, views with guarded holes between them, strided views, arrays more than 2 GiB
apart — with a value distinct per rank and block, small blocks (MPI's plain forms through
scratch) and large ones (MPI's v-forms, straight into the arrays). Registered into
``scenarios.SCENARIOS``; each rank checks its closed-form results and returns, per case,
"ok" or what differed.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import accord as dist

DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "bfloat16")
GUARD = 77  # what the holes between views hold, before and after


def pattern(count: int, dtype: str, rank: int, block: int, reduced: bool = False) -> np.ndarray:
    """Rank ``rank``'s values for block ``block``: small integers (exact in every dtype, and
    in their sum over four ranks), different per rank and block in all but bool."""
    modulus = 2 if dtype == "bool" else 7 if reduced else 50
    values = (np.arange(count) * 3 + 11 * rank + 5 * block) % modulus
    return values.astype("float32" if dtype == "bfloat16" else dtype)


class Layouts:
    """Lists of ``n`` arrays of ``count`` elements, laid out in one of several ways; torch's
    bfloat16 as tensors. ``guards_ok()`` says whether every hole still holds GUARD."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.guards: list[tuple[Any, np.ndarray, np.ndarray]] = []

    def _empty(self, count: int) -> Any:
        if self.dtype == "bfloat16":
            import torch
            return torch.zeros(count, dtype=torch.bfloat16)
        return np.zeros(count, self.dtype)

    def make(self, how: str, counts: list[int]) -> list[Any]:
        n, total = len(counts), sum(counts)
        if how == "separate":
            return [self._empty(c) for c in counts]
        if how == "strided":  # every other element of a wider array: accord copies and writes back
            return [self._empty(2 * c)[::2] for c in counts]
        if how == "far":  # block i at i × 2.5 GiB / n into a buffer never touched elsewhere
            step = (5 << 29) // max(n - 1, 1) // 16 * 16
            whole = np.empty(step * (n - 1) + max(counts) * 16 + 16, np.uint8)
            return [whole[i * step:i * step + c * np.dtype(self.dtype).itemsize].view(self.dtype)
                    for i, c in enumerate(counts)]
        whole = self._empty(2 * total + n + 1)
        starts, at = [], 0
        order = range(n - 1, -1, -1) if how == "reversed" else range(n)
        for i in order:
            at += 1 if how == "holes" else 0
            starts.append((i, at))
            at += counts[i]
        views: list[Any] = [None] * n
        for i, start in starts:
            views[i] = whole[start:start + counts[i]]
        if how == "holes":
            whole[...] = GUARD
            mask = np.ones(len(whole), bool)
            for i, start in starts:
                mask[start:start + counts[i]] = False
            self.guards.append((whole, mask, as_numpy(whole)[mask].copy()))
        return views

    def guards_ok(self) -> bool:
        return all(np.array_equal(as_numpy(whole)[mask], kept) for whole, mask, kept in self.guards)


def as_numpy(x: Any) -> np.ndarray:
    return x.float().numpy() if hasattr(x, "numpy") else np.asarray(x)


def fill(target: Any, values: np.ndarray) -> None:
    if hasattr(target, "copy_"):
        import torch
        target.copy_(torch.from_numpy(values))
    else:
        target[...] = values


def placed_lists(rank: int, n: int) -> Any:
    """Every dtype × small and large blocks × every layout, then the edge cases."""
    out: dict[str, str] = {}

    def check(name: str, got: list[Any], want: list[np.ndarray], layouts: Layouts | None = None,
              ) -> None:
        """out[name]: "ok", or which blocks (-1: a hole between them) differ."""
        wrong = [i for i, (g, w) in enumerate(zip(got, want)) if not np.array_equal(as_numpy(g), w)]
        if layouts is not None and not layouts.guards_ok():
            wrong.append(-1)
        out[name] = "ok" if not wrong else f"blocks {wrong} differ"

    far = n > 1  # (where MPI has no large counts, accord copies them)
    for dtype in DTYPES:
        small, large = 3, (1 << 16) // (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize) + 3
        for count in (small, large):
            hows = ["separate", "reversed", "holes"]
            if far and count == large and dtype != "bfloat16":
                hows.append("far")
            for how in hows + (["strided"] if dtype != "bfloat16" else []):
                key = f"{dtype}-{count}-{how}"
                lay = Layouts(dtype)
                _exchanges(key, lay, rank, n, count, dtype, how, check)
    _edges(rank, n, check)
    return out


def _exchanges(key: str, lay: Layouts, rank: int, n: int, count: int, dtype: str, how: str,
               check: Callable[..., None]) -> None:
    """all_gather, all_to_all and reduce_scatter of ``count`` elements per block, the lists
    laid out as ``how`` says."""
    counts = [count] * n
    outs = lay.make(how, counts)
    inp = lay.make("separate", [count])[0]
    fill(inp, pattern(count, dtype, rank, 0))
    dist.all_gather(outs, inp)
    check(f"all_gather-{key}", outs, [pattern(count, dtype, r, 0) for r in range(n)], lay)
    ins = lay.make(how, counts)
    for j, x in enumerate(ins):
        fill(x, pattern(count, dtype, rank, j))
    got = lay.make(how, counts)
    dist.all_to_all(got, ins)
    check(f"all_to_all-{key}", got, [pattern(count, dtype, r, rank) for r in range(n)], lay)
    for j, x in enumerate(ins):
        fill(x, pattern(count, dtype, rank, j, reduced=True))
    res = lay.make("separate", [count])[0]
    op = dist.ReduceOp.MAX if dtype == "bool" else dist.ReduceOp.SUM
    dist.reduce_scatter(res, ins, op=op)
    values = [pattern(count, dtype, r, rank, reduced=True) for r in range(n)]
    want = np.logical_or.reduce(values) if dtype == "bool" else sum(values[1:], values[0].copy())
    check(f"reduce_scatter-{key}", [res], [np.asarray(want, values[0].dtype)], lay)
    if how in ("separate", "reversed"):  # in place: the input is this rank's own block
        fill(outs[rank], pattern(count, dtype, rank, 1))
        dist.all_gather(outs, outs[rank])
        check(f"all_gather_in_place-{key}", outs, [pattern(count, dtype, r, 1) for r in range(n)],
              lay)
        if dtype != "bool":
            for j, x in enumerate(ins):
                fill(x, pattern(count, dtype, rank, j, reduced=True))
            dist.reduce_scatter(ins[rank], ins)
            check(f"reduce_scatter_in_place-{key}", [ins[rank]], [np.asarray(want, values[0].dtype)],
                  lay)


def _edges(rank: int, n: int, check: Callable[..., None]) -> None:
    """Uneven sizes with empty blocks, an input inside another rank's output, async calls,
    AVG, and ranks calling the list and the tensor forms of one call."""
    def everyone(count: int, dtype: str, block: int) -> list[np.ndarray]:
        return [pattern(count, dtype, r, block) for r in range(n)]

    for scale in (1, 20_000):
        sizes = [(r % 3) * scale for r in range(n)]  # rank 0 (and every third) gives nothing
        outs = [np.full(s, -1, np.int32) for s in sizes]
        dist.all_gather(outs, pattern(sizes[rank], "int32", rank, 2))
        check(f"all_gather_uneven-{scale}", outs,
              [pattern(s, "int32", r, 2) for r, s in enumerate(sizes)])
        sends = [pattern(((rank + j) % 3) * scale, "int64", rank, j) for j in range(n)]
        recvs = [np.full(((r + rank) % 3) * scale, -1, np.int64) for r in range(n)]
        dist.all_to_all(recvs, sends)
        check(f"all_to_all_uneven-{scale}", recvs,
              [pattern(((r + rank) % 3) * scale, "int64", r, rank) for r in range(n)])
        shared = [np.zeros(3 * scale, np.float64) for _ in range(n)]  # input: another rank's block
        inp = shared[(rank + 1) % n]
        inp[...] = pattern(3 * scale, "float64", rank, 3)
        dist.all_gather(shared, inp)
        check(f"all_gather_input_in_outputs-{scale}", shared, everyone(3 * scale, "float64", 3))
        blocks = [np.zeros(2 * scale, np.float32) for _ in range(n)]
        dist.all_gather(blocks, pattern(2 * scale, "float32", rank, 4), async_op=True).wait()
        check(f"all_gather_async-{scale}", blocks, everyone(2 * scale, "float32", 4))
        res = np.zeros(2 * scale, np.float64)
        ins = [pattern(2 * scale, "float64", rank, j) for j in range(n)]
        dist.reduce_scatter(res, ins, op=dist.ReduceOp.AVG, async_op=True).wait()
        check(f"reduce_scatter_avg_async-{scale}", [res],
              [sum(pattern(2 * scale, "float64", r, rank) for r in range(n)) / n])
        got = [np.full(scale, -1, np.int16) for _ in range(n)]
        sends = [pattern(scale, "int16", rank, j) for j in range(n)]
        dist.all_to_all(got, sends, async_op=True).wait()
        check(f"all_to_all_async-{scale}", got, [pattern(scale, "int16", r, rank) for r in range(n)])
        whole = np.zeros(n * 2 * scale, np.int32)  # odd ranks: the tensor forms; even ranks: lists
        mine = pattern(2 * scale, "int32", rank, 5)
        if rank % 2:
            dist.all_gather_into_tensor(whole, mine)
            listed = list(whole.reshape(n, -1))
        else:
            listed = [np.zeros(2 * scale, np.int32) for _ in range(n)]
            dist.all_gather(listed, mine)
        check(f"all_gather_mixed_forms-{scale}", listed, everyone(2 * scale, "int32", 5))
        res = np.zeros(2 * scale, np.int64)
        ins = [pattern(2 * scale, "int64", rank, j) for j in range(n)]
        if rank % 2:
            dist.reduce_scatter_tensor(res, np.concatenate(ins))
        else:
            dist.reduce_scatter(res, ins)
        check(f"reduce_scatter_mixed_forms-{scale}", [res],
              [sum(pattern(2 * scale, "int64", r, rank) for r in range(n))])


LIST_SCENARIOS = {"placed_lists": placed_lists}
