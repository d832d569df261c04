"""accord's collectives on MPI's own: one function per collective, with the arguments of
accord's algorithms (``collectives/``), run against an ``MpiCall``.

Owns: which nonblocking MPI collective serves each accord collective (Iallreduce, Ibcast,
Ireduce, Iallgather(v), Igather(v), Iscatter(v), Ireduce_scatter(_block), Ialltoall(v),
Ibarrier), moving lists of separate arrays (straight into or out of them when they lie end
to end in one buffer, as the ``_into_tensor``/``_single`` forms' do, or, for large gather
and scatter blocks, wherever they lie, by byte offsets from the lowest; through one scratch
buffer otherwise) and what happens after MPI's part (AVG's division, PREMUL_SUM's factor).
Data that is only moved goes as bytes; data that is reduced goes as its MPI type, or with a
user-defined op that runs accord's kernel (``runtime.reduction``). Must not know about
groups or the API.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...collectives.algorithm import Algorithm
from ...reduce_ops import Kernel
from . import agreement, runtime
from .call import MpiCall

#: The fingerprint's algorithm code of MPI's collectives (every rank of an MPI group uses it).
MPI_ALGORITHM_CODE = 0x4D


def _finalize(kernel: Kernel, out: np.ndarray, size: int) -> Any:
    if not kernel.needs_finalize:
        return None
    return lambda: kernel.finalize(out, size)


def _carried(call: MpiCall, op: str, dtype: np.dtype) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """Whether this call's data rides on the check (every rank decides alike, from the
    fingerprint): (this rank's record's data, every rank's) as elements of ``dtype``, for
    the caller to fill, ``call.agree()`` and read. Else None, once the check (if any) ran:
    the caller goes on with MPI's collective. Every function here starts with it or runs
    ``call.agree`` itself."""
    if call.agree is None:
        return None
    nbytes = agreement.record_bytes(op, call.fp.count, dtype.itemsize, call.size)
    if nbytes is None or not call.agreement.carries(nbytes):
        call.agree()
        return None
    return call.agreement.views(dtype, nbytes // dtype.itemsize)


def _pieces(arrays: Sequence[np.ndarray], into: np.ndarray) -> None:
    """``arrays`` end to end into the front of ``into``."""
    offset = 0
    for array in arrays:
        into[offset:offset + array.size] = array
        offset += array.size


def _spread(joined: np.ndarray, arrays: Sequence[np.ndarray]) -> None:
    """The front of ``joined`` back into ``arrays``, end to end (``_pieces`` undone)."""
    offset = 0
    for array in arrays:
        array[...] = joined[offset:offset + array.size]
        offset += array.size


def all_reduce(call: MpiCall, flat: np.ndarray, kernel: Kernel) -> None:
    carried = _carried(call, "all_reduce", flat.dtype)
    if carried is not None:  # the data rides on the check: folded here
        mine, rows = carried
        mine[...] = flat
        call.agree()
        agreement.fold(flat, rows, kernel)
        call.complete([])
        return
    datatype, op = runtime.reduction(flat, kernel)
    mpi = runtime.load()
    call.complete([call.comm.Iallreduce(mpi.IN_PLACE, [flat, datatype], op)],
                  _finalize(kernel, flat, call.size))


def broadcast(call: MpiCall, flat: np.ndarray, src: int) -> None:
    carried = _carried(call, "broadcast", flat.dtype)
    if carried is not None:  # the root's data rides on the check
        mine, rows = carried
        if call.rank == src:
            mine[...] = flat
        call.agree()
        if call.rank != src:
            flat[...] = rows[src]
        call.complete([])
        return
    call.complete([call.comm.Ibcast(runtime.as_bytes(flat), src)])


def reduce(call: MpiCall, flat: np.ndarray, kernel: Kernel, dst: int) -> None:
    """Into ``flat`` on ``dst``; the other ranks' arrays are left as they were."""
    carried = _carried(call, "reduce", flat.dtype)
    if carried is not None:  # every rank's data rides on the check: the root folds it
        mine, rows = carried
        mine[...] = flat
        call.agree()
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
def run_of(arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """The one 1-D array that ``arrays`` (1-D, contiguous, one dtype) fill end to end, or None."""
    if not arrays:
        return None
    first = arrays[0]
    if len(arrays) == 1:
        return first if first.flags.writeable else None
    base = first.base  # the chunks of one array (the _into_tensor / _single forms)
    if (type(base) is np.ndarray and base.ndim == 1 and base.flags.c_contiguous
            and base.flags.writeable and base.dtype == first.dtype
            and base.size == sum(a.size for a in arrays)
            and base.__array_interface__["data"][0] == first.__array_interface__["data"][0]
            and all(a.base is base for a in arrays)
            and all(a.__array_interface__["data"][0] - first.__array_interface__["data"][0]
                    == sum(b.nbytes for b in arrays[:i]) for i, a in enumerate(arrays))):
        return base
    dtype = first.dtype
    start = expected = None
    total = 0
    for array in arrays:
        if array.dtype != dtype:
            return None
        if array.size:
            address = array.__array_interface__["data"][0]
            if expected is None:
                start = array
            elif address != expected:
                return None
            expected = address + array.nbytes
        total += array.size
    if start is None:
        return np.empty(0, dtype)
    if not all(a.flags.writeable for a in arrays if a.size):
        return None
    return np.lib.stride_tricks.as_strided(start, shape=(total,), strides=(dtype.itemsize,))


def _joined(call: MpiCall, arrays: Sequence[np.ndarray], which: int, avoid: Any = None) -> np.ndarray:
    """``arrays`` end to end: their own run, else a scratch copy (also when the run overlaps
    ``avoid``, which MPI forbids for a send and a receive buffer)."""
    run = run_of(arrays)
    if run is not None and (avoid is None or not np.may_share_memory(run, avoid)):
        return run
    total = sum(a.size for a in arrays)
    joined = call.scratch(total, arrays[0].dtype if arrays else np.uint8, which)
    _pieces(arrays, joined)
    return joined


def _receiver(call: MpiCall, arrays: Sequence[np.ndarray], which: int) -> tuple[np.ndarray, Any]:
    """(where MPI writes, what copies it into ``arrays`` afterwards, or None)."""
    run = run_of(arrays)
    if run is not None:
        return run, None
    joined = call.scratch(sum(a.size for a in arrays), arrays[0].dtype, which)
    return joined, lambda: _spread(joined, arrays)


def _bytes_layout(arrays: Sequence[np.ndarray]) -> tuple[list[int], list[int]]:
    counts = [a.nbytes for a in arrays]
    displs = [0] * len(counts)
    for i in range(1, len(counts)):
        displs[i] = displs[i - 1] + counts[i - 1]
    return counts, displs


def _safe_input(inp: np.ndarray, out: np.ndarray) -> np.ndarray:
    return inp.copy() if inp.size and np.may_share_memory(inp, out) else inp


def all_gather(call: MpiCall, inp: np.ndarray, outs: list[np.ndarray]) -> None:
    """``outs[i]`` gets rank i's ``inp`` (sizes may differ from rank to rank)."""
    carried = _carried(call, "all_gather", inp.dtype)
    if carried is not None:  # every rank's block rides on the check
        mine, rows = carried
        mine[:inp.size] = inp
        call.agree()
        for out, row in zip(outs, rows):
            out[...] = row[:out.size]
        call.complete([])
        return
    target, spread = _receiver(call, outs, 0)
    inp = _safe_input(inp, target)
    counts, displs = _bytes_layout(outs)
    if len(set(counts)) == 1:
        request = call.comm.Iallgather(runtime.as_bytes(inp), runtime.as_bytes(target))
    else:
        request = call.comm.Iallgatherv(runtime.as_bytes(inp),
                                        [target.view(np.uint8), counts, displs, runtime.load().BYTE])
    call.complete([request], spread, keep=inp)


#: Blocks of gather and scatter from this many bytes go by MPI's v-forms (Igatherv,
#: Iscatterv), which reach the root's separate arrays where they lie: no scratch copy. Every
#: rank decides alike (the block size is in the fingerprint), whichever path it takes.
PLACED_BYTES = 1 << 16
_INT_MAX = (1 << 31) - 1


def placed(arrays: Sequence[np.ndarray], avoid: np.ndarray) -> tuple[np.ndarray, list[int], list[int]] | None:
    """(the array lowest in memory, each array's bytes, each one's byte offset from it) for
    a v-form collective that reaches every one of ``arrays`` (1-D, C-contiguous) where it
    lies; None when two of them overlap, one overlaps ``avoid`` (MPI forbids both) or an
    offset does not fit MPI's int."""
    addresses = [a.__array_interface__["data"][0] for a in arrays]
    order = sorted(range(len(arrays)), key=addresses.__getitem__)
    low = addresses[order[0]]
    for before, after in zip(order, order[1:]):
        if addresses[before] + arrays[before].nbytes > addresses[after]:
            return None
    top = addresses[order[-1]] + arrays[order[-1]].nbytes
    if top - low > _INT_MAX or any(np.may_share_memory(avoid, a) for a in arrays):
        return None
    return arrays[order[0]], [a.nbytes for a in arrays], [a - low for a in addresses]


def _placed_message(call: MpiCall, arrays: Sequence[np.ndarray], avoid: np.ndarray,
                    receiving: bool) -> tuple[list[Any], Any, Any]:
    """(the root's v-form message of ``arrays``, what to run once it completed, what to keep):
    the arrays where they lie, else a scratch copy (filled now when sending, spread
    afterwards when ``receiving``)."""
    layout = placed(arrays, avoid)
    spread: Any = None
    if layout is None:
        joined = call.scratch(sum(a.size for a in arrays), arrays[0].dtype, 0)
        counts, displs = _bytes_layout(arrays)
        layout = (joined, counts, displs)
        if receiving:
            spread = lambda: _spread(joined, arrays)  # noqa: E731
        else:
            _pieces(arrays, joined)
    base, counts, displs = layout
    return [base.view(np.uint8), counts, displs, runtime.load().BYTE], spread, (base, arrays)


def gather(call: MpiCall, inp: np.ndarray, outs: list[np.ndarray] | None, dst: int) -> None:
    carried = _carried(call, "gather", inp.dtype)
    if carried is not None:  # every rank's block rides on the check: the root copies them
        mine, rows = carried
        mine[...] = inp
        call.agree()
        if outs is not None:
            for out, row in zip(outs, rows):
                out[...] = row
        call.complete([])
        return
    if inp.nbytes >= PLACED_BYTES:
        if call.rank != dst:
            call.complete([call.comm.Igatherv(runtime.as_bytes(inp), None, dst)], keep=inp)
            return
        assert outs is not None
        message, spread, keep = _placed_message(call, outs, inp, receiving=True)
        call.complete([call.comm.Igatherv(runtime.as_bytes(inp), message, dst)], spread, keep=(inp, keep))
        return
    if call.rank != dst:
        call.complete([call.comm.Igather(runtime.as_bytes(inp), None, dst)], keep=inp)
        return
    assert outs is not None
    target, spread = _receiver(call, outs, 0)
    inp = _safe_input(inp, target)
    call.complete([call.comm.Igather(runtime.as_bytes(inp), runtime.as_bytes(target), dst)], spread,
                  keep=inp)


def scatter(call: MpiCall, out: np.ndarray, ins: list[np.ndarray] | None, src: int) -> None:
    carried = _carried(call, "scatter", out.dtype)
    if carried is not None:  # the root's blocks for every rank ride on the check
        mine, rows = carried
        if ins is not None:
            _pieces(ins, mine)
        call.agree()
        out[...] = rows[src][call.rank * out.size:(call.rank + 1) * out.size]
        call.complete([])
        return
    if out.nbytes >= PLACED_BYTES:
        if call.rank != src:
            call.complete([call.comm.Iscatterv(None, runtime.as_bytes(out), src)])
            return
        assert ins is not None
        message, _, keep = _placed_message(call, ins, out, receiving=False)
        call.complete([call.comm.Iscatterv(message, runtime.as_bytes(out), src)], keep=keep)
        return
    if call.rank != src:
        call.complete([call.comm.Iscatter(None, runtime.as_bytes(out), src)])
        return
    assert ins is not None
    source = _joined(call, ins, 0, avoid=out)
    call.complete([call.comm.Iscatter(runtime.as_bytes(source), runtime.as_bytes(out), src)],
                  keep=source)


def reduce_scatter(call: MpiCall, out: np.ndarray, ins: list[np.ndarray], kernel: Kernel) -> None:
    """``out`` on rank j gets the reduction of every rank's ``ins[j]``."""
    carried = _carried(call, "reduce_scatter", out.dtype)
    if carried is not None:  # every rank's whole input rides on the check: block j folded here
        mine, rows = carried
        _pieces(ins, mine)
        call.agree()
        start = sum(a.size for a in ins[:call.rank])
        agreement.fold(out, [row[start:start + out.size] for row in rows], kernel)
        call.complete([])
        return
    source = _joined(call, ins, 0, avoid=out)
    datatype, op = runtime.reduction(out, kernel)
    counts = [a.size for a in ins]
    if len(set(counts)) == 1:
        request = call.comm.Ireduce_scatter_block([source, datatype], [out, datatype], op)
    else:
        request = call.comm.Ireduce_scatter([source, datatype], [out, datatype], counts, op)
    call.complete([request], _finalize(kernel, out, call.size), keep=source)


def all_to_all(call: MpiCall, outs: list[np.ndarray], ins: list[np.ndarray]) -> None:
    """``outs[j]`` gets rank j's ``ins[me]``; sizes may differ for every pair."""
    carried = _carried(call, "all_to_all", ins[0].dtype if ins else np.dtype(np.uint8))
    if carried is not None:  # (even blocks) every rank's whole input rides on the check
        mine, rows = carried
        _pieces(ins, mine)
        call.agree()
        block = ins[0].size
        for out, row in zip(outs, rows):
            out[...] = row[call.rank * block:(call.rank + 1) * block]
        call.complete([])
        return
    target, spread = _receiver(call, outs, 1)
    source = _joined(call, ins, 0, avoid=target)
    send_counts, send_displs = _bytes_layout(ins)
    recv_counts, recv_displs = _bytes_layout(outs)
    mpi = runtime.load()
    if len(set(send_counts)) == 1 and send_counts == recv_counts:
        request = call.comm.Ialltoall(runtime.as_bytes(source), runtime.as_bytes(target))
    else:
        request = call.comm.Ialltoallv([source.view(np.uint8), send_counts, send_displs, mpi.BYTE],
                                       [target.view(np.uint8), recv_counts, recv_displs, mpi.BYTE])
    call.complete([request], spread, keep=source)


_FUNCTIONS = {"all_reduce": all_reduce, "broadcast": broadcast, "reduce": reduce, "barrier": barrier,
              "all_gather": all_gather, "gather": gather, "scatter": scatter,
              "reduce_scatter": reduce_scatter, "all_to_all": all_to_all}

#: One Algorithm per collective: what an MPI group's choose_algorithm returns.
ALGORITHMS = {name: Algorithm(name, "mpi", MPI_ALGORITHM_CODE, run, "MPI's own collective")
              for name, run in _FUNCTIONS.items()}
