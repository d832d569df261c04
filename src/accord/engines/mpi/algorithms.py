"""accord's collectives on MPI's own: one function per collective, with the arguments of
accord's algorithms (``collectives/``), run against an ``MpiCall``.

Owns: which nonblocking MPI collective serves each accord collective (Iallreduce, Ibcast,
Ireduce, Iallgather(v), Igather(v), Iscatter(v), Ireduce_scatter(_block), Ialltoall(v),
Ibarrier) — chosen alike on every rank from what the fingerprint fixes (sizes, never where
the arrays lie: MPI forbids one rank's Iallgather to meet another's Iallgatherv) — and what
happens around MPI's part (AVG's division, PREMUL_SUM's factor; reduce_scatter of large
blocks as an exchange folded here). Lists of separate arrays go by MPI's v-forms straight
into or out of them where they lie, for large blocks (``layouts``), and through one scratch
buffer for small ones unless they lie end to end. Data that is only moved goes as bytes;
data that is reduced goes as its MPI type, or with a user-defined op that runs accord's
kernel (``runtime.reduction``). Must not know about groups or the API.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...collectives.algorithm import Algorithm
from ...reduce_ops import Kernel
from . import agreement, layouts, runtime
from .call import MpiCall

#: The fingerprint's algorithm code of MPI's collectives (every rank of an MPI group uses it).
MPI_ALGORITHM_CODE = 0x4D


def _finalize(kernel: Kernel, out: np.ndarray, size: int) -> Any:
    if not kernel.needs_finalize:
        return None
    return lambda: kernel.finalize(out, size)


#: (this rank's record's data, every rank's, the check that exchanges them)
Carried = tuple[np.ndarray, list[np.ndarray], Callable[[], None]]


def _carried(call: MpiCall, op: str, dtype: np.dtype) -> Carried | None:
    """Whether this call's data rides on the check (every rank decides alike, from the
    fingerprint): (this rank's record's data, every rank's) as elements of ``dtype``, and
    the check, for the caller to fill, call and read. Else None, once the check (if any)
    ran: the caller goes on with MPI's collective. Every function here starts with it or
    runs ``call.agree`` itself."""
    agree = call.agree
    if agree is None:
        return None
    nbytes = agreement.record_bytes(op, call.fp.count, dtype.itemsize, call.size)
    if nbytes is None or not call.agreement.carries(nbytes):
        agree()
        return None
    mine, rows = call.agreement.views(dtype, nbytes // dtype.itemsize)
    return mine, rows, agree


def all_reduce(call: MpiCall, flat: np.ndarray, kernel: Kernel) -> None:
    carried = _carried(call, "all_reduce", flat.dtype)
    if carried is not None:  # the data rides on the check: folded here
        mine, rows, agree = carried
        mine[...] = flat
        agree()
        agreement.fold(flat, rows, kernel)
        call.complete([])
        return
    datatype, op = runtime.reduction(flat, kernel)
    mpi = runtime.load()
    call.complete(
        [call.comm.Iallreduce(mpi.IN_PLACE, [flat, datatype], op)], _finalize(kernel, flat, call.size)
    )


def broadcast(call: MpiCall, flat: np.ndarray, src: int) -> None:
    carried = _carried(call, "broadcast", flat.dtype)
    if carried is not None:  # the root's data rides on the check
        mine, rows, agree = carried
        if call.rank == src:
            mine[...] = flat
        agree()
        if call.rank != src:
            flat[...] = rows[src]
        call.complete([])
        return
    call.complete([call.comm.Ibcast(runtime.as_bytes(flat), src)])


def reduce(call: MpiCall, flat: np.ndarray, kernel: Kernel, dst: int) -> None:
    """Into ``flat`` on ``dst``; the other ranks' arrays are left as they were."""
    carried = _carried(call, "reduce", flat.dtype)
    if carried is not None:  # every rank's data rides on the check: the root folds it
        mine, rows, agree = carried
        mine[...] = flat
        agree()
        if call.rank == dst:
            agreement.fold(flat, rows, kernel)
        call.complete([])
        return
    datatype, op = runtime.reduction(flat, kernel)
    if call.rank == dst:
        request = call.comm.Ireduce(runtime.load().IN_PLACE, [flat, datatype], op, dst)
        call.complete([request], _finalize(kernel, flat, call.size))
    else:
        call.complete([call.comm.Ireduce([flat, datatype], None, op, dst)])


def barrier(call: MpiCall) -> None:
    if call.agree is not None:  # no rank leaves the check before every rank entered it
        call.agree()
        call.complete([])
        return
    call.complete([call.comm.Ibarrier()])


# -- lists of arrays ------------------------------------------------------------------------------
#: Blocks from this many bytes go by MPI's v-forms (Iallgatherv, Igatherv, Iscatterv), which
#: reach separate arrays where they lie: no scratch copy. Smaller ones go by the plain forms
#: (fewer steps in MPI's algorithms for small messages), through one scratch buffer when the
#: arrays do not lie end to end. reduce_scatter from blocks of this size is an exchange
#: (``_exchanged``). Every rank decides alike, from the block size that the fingerprint fixes,
#: whichever form it was called with and wherever its arrays lie: MPI forbids mixing forms.
PLACED_BYTES = 1 << 16


def _joined(call: MpiCall, arrays: Sequence[np.ndarray], which: int, avoid: Any = None) -> np.ndarray:
    """``arrays`` end to end: their own run, else a scratch copy (also when the run overlaps
    ``avoid``, which MPI forbids for a send and a receive buffer)."""
    run = layouts.run_of(arrays)
    if run is not None and (avoid is None or not np.may_share_memory(run, avoid)):
        return run
    dtype = arrays[0].dtype if arrays else np.dtype(np.uint8)
    joined = call.scratch(sum(a.size for a in arrays), dtype, which)
    layouts.pieces(arrays, joined)
    return joined


def _receiver(call: MpiCall, arrays: Sequence[np.ndarray], which: int) -> tuple[np.ndarray, Any]:
    """(where MPI writes, what copies it into ``arrays`` afterwards, or None)."""
    run = layouts.run_of(arrays)
    if run is not None:
        return run, None
    joined = call.scratch(sum(a.size for a in arrays), arrays[0].dtype, which)
    return joined, lambda: layouts.spread(joined, arrays)


def _safe_input(inp: np.ndarray, out: np.ndarray) -> np.ndarray:
    return inp.copy() if inp.size and np.may_share_memory(inp, out) else inp


def all_gather(call: MpiCall, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """``outs[i]`` gets rank i's ``inp`` (sizes may differ from rank to rank)."""
    carried = _carried(call, "all_gather", inp.dtype)
    if carried is not None:  # every rank's block rides on the check
        mine, rows, agree = carried
        mine[: inp.size] = inp
        agree()
        for out, row in zip(outs, rows):
            out[...] = row[: out.size]
        call.complete([])
        return
    if outs[0].nbytes < PLACED_BYTES and all(o.size == inp.size for o in outs):
        target, spread = _receiver(call, outs, 0)
        inp = _safe_input(inp, target)
        request = call.comm.Iallgather(runtime.as_bytes(inp), runtime.as_bytes(target))
        call.complete([request], spread, keep=inp)
        return
    where = layouts.spans(outs)  # Iallgatherv: into the outputs where they lie
    into, spread = layouts.received(call, outs, 0, where=where)
    own = layouts.spans([inp])
    if spread is None and inp.size and own[0] == where[call.rank]:
        message: Any = runtime.load().IN_PLACE  # (the input is this rank's output: torch allows it)
    else:
        if spread is None and not layouts.disjoint(where, own):
            inp = inp.copy()
        message = runtime.as_bytes(inp)
    call.complete([call.comm.Iallgatherv(message, into.message())], spread, keep=(inp, into.base))


def gather(call: MpiCall, inp: np.ndarray, outs: list[np.ndarray] | None, dst: int) -> None:
    carried = _carried(call, "gather", inp.dtype)
    if carried is not None:  # every rank's block rides on the check: the root copies them
        mine, rows, agree = carried
        mine[...] = inp
        agree()
        if outs is not None:
            for out, row in zip(outs, rows):
                out[...] = row
        call.complete([])
        return
    if inp.nbytes >= PLACED_BYTES:  # Igatherv: into the root's arrays where they lie
        if call.rank != dst:
            call.complete([call.comm.Igatherv(runtime.as_bytes(inp), None, dst)], keep=inp)
            return
        assert outs is not None
        into, spread = layouts.received(call, outs, 0, read=layouts.spans([inp]))
        request = call.comm.Igatherv(runtime.as_bytes(inp), into.message(), dst)
        call.complete([request], spread, keep=(inp, into.base))
        return
    if call.rank != dst:
        call.complete([call.comm.Igather(runtime.as_bytes(inp), None, dst)], keep=inp)
        return
    assert outs is not None
    target, spread = _receiver(call, outs, 0)
    inp = _safe_input(inp, target)
    call.complete([call.comm.Igather(runtime.as_bytes(inp), runtime.as_bytes(target), dst)], spread, keep=inp)


def scatter(call: MpiCall, out: np.ndarray, ins: list[np.ndarray] | None, src: int) -> None:
    carried = _carried(call, "scatter", out.dtype)
    if carried is not None:  # the root's blocks for every rank ride on the check
        mine, rows, agree = carried
        if ins is not None:
            layouts.pieces(ins, mine)
        agree()
        out[...] = rows[src][call.rank * out.size : (call.rank + 1) * out.size]
        call.complete([])
        return
    if out.nbytes >= PLACED_BYTES:  # Iscatterv: out of the root's arrays where they lie
        if call.rank != src:
            call.complete([call.comm.Iscatterv(None, runtime.as_bytes(out), src)])
            return
        assert ins is not None
        source = layouts.sent(call, ins, 0, written=layouts.spans([out]))
        request = call.comm.Iscatterv(source.message(), runtime.as_bytes(out), src)
        call.complete([request], keep=source.base)
        return
    if call.rank != src:
        call.complete([call.comm.Iscatter(None, runtime.as_bytes(out), src)])
        return
    assert ins is not None
    joined = _joined(call, ins, 0, avoid=out)
    call.complete([call.comm.Iscatter(runtime.as_bytes(joined), runtime.as_bytes(out), src)], keep=joined)


def reduce_scatter(call: MpiCall, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """``out`` on rank j gets the reduction of every rank's ``ins[j]``."""
    carried = _carried(call, "reduce_scatter", out.dtype)
    if carried is not None:  # every rank's whole input rides on the check: block j folded here
        mine, rows, agree = carried
        layouts.pieces(ins, mine)
        agree()
        start = sum(a.size for a in ins[: call.rank])
        agreement.fold(out, [row[start : start + out.size] for row in rows], kernel)
        call.complete([])
        return
    if sum(a.nbytes for a in ins) >= PLACED_BYTES * call.size:
        _exchanged(call, out, ins, kernel)
        return
    source = _joined(call, ins, 0, avoid=out)
    datatype, op = runtime.reduction(out, kernel)
    counts = [a.size for a in ins]
    if len(set(counts)) == 1:
        request = call.comm.Ireduce_scatter_block([source, datatype], [out, datatype], op)
    else:
        request = call.comm.Ireduce_scatter([source, datatype], [out, datatype], counts, op)
    call.complete([request], _finalize(kernel, out, call.size), keep=source)


def _exchanged(call: MpiCall, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """reduce_scatter of large blocks: each rank sends its ``ins[j]`` to rank j from where it
    lies (one Ialltoallv) and folds the blocks it got with ``ins[me]`` by accord's kernel, as
    MPI's pairwise algorithm for large blocks does inside, but with no copy of the input
    (MPI's reduce_scatter needs it end to end), and quicker than MPICH's Ireduce_scatter_block
    even where it is (measured: ``accord bench --backend mpi``)."""
    me, size, count = call.rank, call.size, out.size
    rows_joined = call.scratch(size * count, out.dtype, 1)
    rows = [rows_joined[j * count : (j + 1) * count] for j in range(size)]
    source = layouts.sent(call, ins, 0)
    if layouts.disjoint(layouts.spans([out]), layouts.spans([source.arrays[me]])):
        rows[me] = source.arrays[me]
    else:  # the output is (or shares bytes with) this rank's input: folded from a copy
        rows[me][...] = source.arrays[me]
    counts, displs = layouts.blocks(size, out.nbytes, skip=me)
    into = [rows_joined.view(np.uint8), counts, displs, runtime.load().BYTE]
    request = call.comm.Ialltoallv(source.message(skip=me), into)
    call.complete([request], lambda: agreement.fold(out, rows, kernel), keep=(source.base, rows_joined))


def all_to_all(call: MpiCall, outs: list[np.ndarray], ins: list[np.ndarray]) -> None:
    """``outs[j]`` gets rank j's ``ins[me]``; sizes may differ for every pair."""
    carried = _carried(call, "all_to_all", ins[0].dtype if ins else np.dtype(np.uint8))
    if carried is not None:  # (even blocks) every rank's whole input rides on the check
        mine, rows, agree = carried
        layouts.pieces(ins, mine)
        agree()
        block = ins[0].size
        for out, row in zip(outs, rows):
            out[...] = row[call.rank * block : (call.rank + 1) * block]
        call.complete([])
        return
    if call.fp is not None and call.fp.count:  # the even all_to_all_single, as on its short path
        target, spread = _receiver(call, outs, 1)
        source = _joined(call, ins, 0, avoid=target)
        request = call.comm.Ialltoall(runtime.as_bytes(source), runtime.as_bytes(target))
        call.complete([request], spread, keep=source)
        return
    # the list forms and the uneven all_to_all_single (whose fingerprints count 0): Ialltoallv
    # where the arrays lie, a rank's own block copied here (MPICH's Ialltoallv moves it
    # through its own messages, twice as slowly, measured)
    me, where = call.rank, layouts.spans(outs)
    into, spread = layouts.received(call, outs, 1, where=where)
    placed = layouts.sent(call, ins, 0, written=where if spread is None else ())
    into.arrays[me][...] = placed.arrays[me]
    request = call.comm.Ialltoallv(placed.message(skip=me), into.message(skip=me))
    call.complete([request], spread, keep=(placed.base, into.base))


_FUNCTIONS: dict[str, Callable[..., None]] = {
    "all_reduce": all_reduce,
    "broadcast": broadcast,
    "reduce": reduce,
    "barrier": barrier,
    "all_gather": all_gather,
    "gather": gather,
    "scatter": scatter,
    "reduce_scatter": reduce_scatter,
    "all_to_all": all_to_all,
}

#: One Algorithm per collective: what an MPI group's choose_algorithm returns.
ALGORITHMS = {
    name: Algorithm(name, "mpi", MPI_ALGORITHM_CODE, run, "MPI's own collective")
    for name, run in _FUNCTIONS.items()
}
