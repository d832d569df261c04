"""The short path of the rooted blocking collectives (reduce, gather, scatter) and the
exchanges (all_gather_into_tensor, reduce_scatter_tensor, the even all_to_all_single) on an
MPI group.

Owns: ``RootedAndExchanges``, the half of ``DirectPath`` for these: per call signature, the plan
the long path would make (the same argument checks, so the same errors; the same
fingerprint, so a rank here and a rank on the long path meet in the same check), and per
call only the check, MPI's nonblocking collective on the user's arrays and a test loop
(``DirectPath._run``) — or, for a small call, only the check, with the data in it
(``agreement.record_bytes``: the same choice as the long path's). Arrays it cannot hand to
MPI as they are — not C-contiguous NumPy arrays, an input that overlaps the output (MPI
forbids it; the long path copies), a root's list that is not a list of plain arrays — return
False: the long path takes them and
explains what is wrong. A root's list of separate arrays goes through the group's reused
scratch buffer for small blocks, and by MPI's v-forms straight into or out of the arrays for
large ones; large blocks of all_gather_into_tensor go by Iallgatherv and of
reduce_scatter_tensor by the exchange: the MPI calls of the long path, whose list forms
meet these in one call (``algorithms.PLACED_BYTES``). Must not know about the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...arrays import as_buffer
from ...group.arguments import (
    all_gather_into_tensor_buffers,
    all_to_all_single_buffers,
    reduce_scatter_tensor_buffers,
    root_list,
)
from ...group.calls import CallSequencer
from ...group.recorder import CallRecord
from ...reduce_ops import as_reduce_op, make_kernel
from . import layouts, runtime
from .agreement import Agreement, fingerprint_hash, fold, record_bytes
from .algorithms import ALGORITHMS, PLACED_BYTES

_NDARRAY = np.ndarray
_shares = np.may_share_memory

#: The most call signatures a group keeps plans of (then the cache starts again).
MAX_PLANS = 512


def _plain(array: Any, writes: bool) -> bool:
    if type(array) is not _NDARRAY:
        return False
    flags = array.flags
    return bool(flags.c_contiguous and (flags.writeable or not writes))


def _root_list(arrays: Any, size: int, writes: bool) -> tuple[Any, ...] | None:
    """The signature (dtype, size of each) of a root's list of ``size`` plain arrays, else None."""
    if (type(arrays) is not list and type(arrays) is not tuple) or len(arrays) != size:
        return None
    signature: list[Any] = []
    for array in arrays:
        if not _plain(array, writes):
            return None
        signature += (array.dtype, array.size)
    return tuple(signature)


class RootedAndExchanges:
    """The short paths of reduce, gather, scatter and the tensor forms of all_gather,
    reduce_scatter and all_to_all (a mixin of ``DirectPath``, which provides ``_group``,
    ``_engine``, the group's ``_calls`` and ``_rank``, ``_plans``, ``_usable``, ``_begin`` and ``_run``)."""

    _group: Any
    _engine: Any
    _calls: CallSequencer
    _end_call: Callable[[CallRecord], None]
    _rank: int
    _plans: dict[Any, Any]
    _usable: Callable[[], bool]
    _run: Callable[..., None]
    _begin: Callable[..., CallRecord]
    _byte: Any
    _in_place: Any
    _agreement: Agreement

    def _cached(self, key: tuple[Any, ...], make: Callable[..., Any], *args: Any) -> Any:
        """The plan of a call signature, made once by ``make(*args)`` (which raises the long
        path's error for bad arguments, caching nothing); False: take the long path."""
        plans = self._plans
        try:
            return plans[key]
        except KeyError:
            if len(plans) >= MAX_PLANS:  # a program of ever-new shapes: start again
                plans.clear()
            plan = plans[key] = make(*args)
            return plan
        except TypeError:  # an unhashable argument (op): the long path explains it
            return False

    def _fingerprint(self, op: str, buf: Any, root: int = -1, count: int | None = None) -> tuple[Any, int]:
        """(fingerprint, its hash) as the long path (``launch``) makes them."""
        fp = self._group.fingerprint(op, ALGORITHMS[op], buf, root)
        if count is not None:
            fp = fp._replace(count=count)
        return fp, fingerprint_hash(fp)

    def _carry(self, op: str, fp: Any, dtype: np.dtype) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """(this rank's record's data, every rank's) when a call of ``op`` with fingerprint
        ``fp`` rides on the check, as the long path decides (``algorithms._carried``); else None."""
        agreement = self._agreement
        nbytes = record_bytes(op, fp.count, dtype.itemsize, self._group.size())
        if not self._engine.checks or nbytes is None or not agreement.carries(nbytes):
            return None
        return agreement.views(dtype, nbytes // dtype.itemsize)

    def _pairwise(self, kernel: Any, rows: list[np.ndarray]) -> Any:
        """The ufunc that folds two ranks' rows in one step (fold's commonest case), or None."""
        return kernel.ufunc if len(rows) == 2 and not kernel.needs_finalize else None

    # -- reduce -------------------------------------------------------------------------------
    def reduce(self, tensor: Any, dst: Any, op: Any) -> bool:
        group = self._group
        if type(dst) is not int or not 0 <= dst < group.size():
            return False
        root = self._rank == dst
        if not (_plain(tensor, root) and tensor.size and self._usable()):
            return False
        key = ("reduce", op, dst, tensor.dtype, tensor.size)
        plan = self._cached(key, self._plan_reduce, tensor, dst, op)
        if plan is False:
            return False
        fp, h, datatype, mpi_op, kernel, carried = plan
        flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
        if carried is not None:  # every rank's data rides on the check: the root folds it
            mine, rows, pairwise = carried
            mine[...] = flat
            entry = self._begin("reduce", fp, h)
            if root:
                if pairwise is not None:
                    pairwise(rows[0], rows[1], out=flat)
                else:
                    fold(flat, rows, kernel)
            self._end_call(entry)
            return True
        if root:
            self._run(
                "reduce", fp, h, self._engine.comm.Ireduce, (self._in_place, [flat, datatype], mpi_op, dst)
            )
            if kernel.needs_finalize:
                kernel.finalize(flat, group.size())
        else:
            self._run("reduce", fp, h, self._engine.comm.Ireduce, ([flat, datatype], None, mpi_op, dst))
        return True

    def _plan_reduce(self, tensor: np.ndarray, dst: int, op: Any) -> tuple[Any, ...]:
        buf = as_buffer(tensor, writable=dst == self._rank)
        kernel = make_kernel(as_reduce_op(op), buf.flat.dtype, buf.dtype_name)
        fp, h = self._fingerprint("reduce", buf, dst)
        views = self._carry("reduce", fp, buf.flat.dtype)
        carried = None if views is None else (*views, self._pairwise(kernel, views[1]))
        return (fp, h, *runtime.reduction(buf.flat, kernel), kernel, carried)

    # -- gather, scatter --------------------------------------------------------------------
    def gather(self, tensor: Any, gather_list: Any, dst: Any) -> bool:
        return self._rooted("gather", tensor, gather_list, dst, False)

    def scatter(self, tensor: Any, scatter_list: Any, src: Any) -> bool:
        return self._rooted("scatter", tensor, scatter_list, src, True)

    def _rooted(self, op: str, tensor: Any, tensors: Any, root: Any, tensor_writes: bool) -> bool:
        """gather (``tensors`` written on the root) and scatter (``tensor`` written
        everywhere): on the root a list of plain arrays, elsewhere None or []."""
        group = self._group
        if type(root) is not int or not 0 <= root < group.size():
            return False
        if not (_plain(tensor, tensor_writes) and tensor.size and self._usable()):
            return False
        is_root = self._rank == root
        if is_root:
            signature = _root_list(tensors, group.size(), not tensor_writes)
            if signature is None:
                return False
        elif tensors is None or (type(tensors) is list and not tensors):
            signature = ()
        else:
            return False  # the long path explains what a non-root's list is doing there
        key = (op, root, tensor.dtype, tensor.size, signature)
        plan = self._cached(key, self._plan_rooted, op, tensor, tensors, root)
        if plan is False:
            return False
        fp, h, datatype, carried = plan
        flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
        if carried is not None:  # the blocks ride on the check
            mine, theirs = carried
            if op == "gather":  # every rank's block; the root copies them out
                mine[...] = flat
                entry = self._begin(op, fp, h)
                if is_root:
                    for array, row in zip(tensors, theirs):
                        array.reshape(-1)[...] = row
            else:  # the root's blocks for every rank (``mine``: one view per rank)
                if is_root:
                    for piece, array in zip(mine, tensors):
                        piece[...] = array.reshape(-1)
                entry = self._begin(op, fp, h)
                flat[...] = theirs
            self._end_call(entry)
            return True
        comm = self._engine.comm
        if flat.nbytes >= PLACED_BYTES:  # MPI's v-form, straight into or out of the root's arrays
            return self._placed(op, fp, h, flat, tensors if is_root else None, root)
        if not is_root:
            if op == "gather":
                self._run(op, fp, h, comm.Igather, ([flat, datatype], None, root))
            else:
                self._run(op, fp, h, comm.Iscatter, (None, [flat, datatype], root))
            return True
        joined = group.calls.scratch.array(flat.size * len(tensors), flat.dtype)
        rows = joined.reshape(len(tensors), flat.size)
        if op == "gather":
            self._run(op, fp, h, comm.Igather, ([flat, datatype], [joined, datatype], root))
            for row, array in zip(rows, tensors):
                array.reshape(-1)[...] = row
        else:
            for row, array in zip(rows, tensors):
                row[...] = array.reshape(-1)
            self._run(op, fp, h, comm.Iscatter, ([joined, datatype], [flat, datatype], root))
        return True

    def _placed(self, op: str, fp: Any, h: int, flat: np.ndarray, tensors: Any, root: int) -> bool:
        """A large gather or scatter by MPI's v-form (``tensors``: the root's list, else None)."""
        comm = self._engine.comm
        mine = runtime.as_bytes(flat)  # bytes on both sides, as the long path sends them
        theirs = None
        if tensors is not None:
            flats = [a.reshape(-1) for a in tensors]
            found = layouts.reach(flats, op == "gather", layouts.spans([flat]))
            if found is None:
                return False  # overlapping arrays: the long path copies them
            theirs = found.message()
        self._run(
            op,
            fp,
            h,
            *(
                (comm.Igatherv, (mine, theirs, root))
                if op == "gather"
                else (comm.Iscatterv, (theirs, mine, root))
            ),
        )
        return True

    def _plan_rooted(self, op: str, tensor: np.ndarray, tensors: Any, root: int) -> tuple[Any, ...]:
        group = self._group
        mine = as_buffer(tensor, writable=op == "scatter")
        role, what = ("dst", "gather_list") if op == "gather" else ("src", "scatter_list")
        root_list(self._rank, group.size(), tensors, root, what, role, mine, writable=op == "gather")
        fp, h = self._fingerprint(op, mine, root)
        carried: Any = self._carry(op, fp, mine.flat.dtype)
        if carried is not None and op == "scatter":  # (each rank's block of the root's record)
            count, me = mine.count, self._rank
            ours, rows = carried
            carried = (
                [ours[i * count : (i + 1) * count] for i in range(group.size())],
                rows[root][me * count : (me + 1) * count],
            )
        return fp, h, runtime.element_type(mine.flat.itemsize), carried

    # -- the tensor forms -------------------------------------------------------------------
    def all_gather_into_tensor(self, output: Any, inp: Any) -> bool:
        if not (_plain(output, True) and _plain(inp, False) and inp.size and self._usable()):
            return False
        key = ("all_gather_into_tensor", output.dtype, output.size, inp.dtype, inp.size)
        plan = self._cached(key, self._plan_all_gather, output, inp)
        if plan is False:
            return False
        fp, h, datatype, carried, spaced = plan
        if carried is not None:  # every rank's block rides on the check
            mine, table = carried
            mine[...] = inp if inp.ndim == 1 else inp.reshape(-1)
            entry = self._begin("all_gather", fp, h)
            output.reshape(table.shape)[...] = table
            self._end_call(entry)
            return True
        if _shares(inp, output):
            return False  # MPI forbids it: the long path copies the input first (or goes in place)
        comm = self._engine.comm
        if spaced is not None:  # large blocks: Iallgatherv, as the long path's list form
            into = [output.reshape(-1).view(np.uint8), *spaced, self._byte]
            self._run("all_gather", fp, h, comm.Iallgatherv, (runtime.as_bytes(inp.reshape(-1)), into))
        else:
            self._run("all_gather", fp, h, comm.Iallgather, ([inp, datatype], [output, datatype]))
        return True

    def _plan_all_gather(self, output: np.ndarray, inp: np.ndarray) -> tuple[Any, ...]:
        i, o = all_gather_into_tensor_buffers(self._group.size(), output, inp)
        fp, h = self._fingerprint("all_gather", i, count=o.count)
        views = self._carry("all_gather", fp, i.flat.dtype)
        carried = (  # (this rank's block at the front of its record)
            None if views is None else (views[0][: i.count], self._agreement.table(i.flat.dtype, i.count))
        )
        size = self._group.size()
        spaced = layouts.blocks(size, i.nbytes) if i.nbytes >= PLACED_BYTES else None
        return fp, h, runtime.element_type(i.flat.itemsize), carried, spaced

    def reduce_scatter_tensor(self, output: Any, inp: Any, op: Any) -> bool:
        if not (_plain(output, True) and _plain(inp, False) and output.size and self._usable()):
            return False
        key = ("reduce_scatter_tensor", op, output.dtype, output.size, inp.dtype, inp.size)
        plan = self._cached(key, self._plan_reduce_scatter, output, inp, op)
        if plan is False:
            return False
        fp, h, datatype, mpi_op, kernel, carried, spaced = plan
        if carried is not None:  # every rank's whole input rides on the check
            mine, blocks, pairwise = carried
            mine[...] = inp if inp.ndim == 1 else inp.reshape(-1)
            entry = self._begin("reduce_scatter", fp, h)
            flat = output if output.ndim == 1 else output.reshape(-1)
            if pairwise is not None:
                pairwise(blocks[0], blocks[1], out=flat)
            else:
                fold(flat, blocks, kernel)
            self._end_call(entry)
            return True
        if _shares(inp, output):
            return False
        group = self._group
        if spaced is not None:  # large blocks: the long path's exchange (algorithms._exchanged)
            flat, me, count = inp.reshape(-1), self._rank, output.size
            joined = group.calls.scratch.array(group.size() * count, flat.dtype, 1)
            byte = self._byte
            messages = ([flat.view(np.uint8), *spaced, byte], [joined.view(np.uint8), *spaced, byte])
            self._run("reduce_scatter", fp, h, self._engine.comm.Ialltoallv, messages)
            rows = [(flat if j == me else joined)[j * count : (j + 1) * count] for j in range(group.size())]
            fold(output.reshape(-1), rows, kernel)
            return True
        self._run(
            "reduce_scatter",
            fp,
            h,
            self._engine.comm.Ireduce_scatter_block,
            ([inp, datatype], [output, datatype], mpi_op),
        )
        if kernel.needs_finalize:
            kernel.finalize(output.reshape(-1), group.size())
        return True

    def _plan_reduce_scatter(self, output: np.ndarray, inp: np.ndarray, op: Any) -> tuple[Any, ...]:
        o, i = reduce_scatter_tensor_buffers(self._group.size(), output, inp)
        kernel = make_kernel(as_reduce_op(op), o.flat.dtype, o.dtype_name)
        fp, h = self._fingerprint("reduce_scatter", o, count=i.count)
        carried: Any = self._carry("reduce_scatter", fp, o.flat.dtype)
        if carried is not None:  # (this rank's block of every rank's record)
            start = self._rank * o.count
            blocks = [row[start : start + o.count] for row in carried[1]]
            carried = (carried[0], blocks, self._pairwise(kernel, blocks))
        size, me = self._group.size(), self._rank
        spaced = None
        if i.nbytes >= PLACED_BYTES * size:  # large blocks: the exchange, as on the long path
            spaced = layouts.blocks(size, o.nbytes, skip=me)
        return (fp, h, *runtime.reduction(o.flat, kernel), kernel, carried, spaced)

    def all_to_all_single(
        self, output: Any, inp: Any, output_split_sizes: Any, input_split_sizes: Any
    ) -> bool:
        """The even form only (no split sizes): piece j of dim 0 goes to rank j."""
        if any(sizes is not None and len(sizes) for sizes in (output_split_sizes, input_split_sizes)):
            return False  # (split sizes, as a list, an array or a tensor: the long path's)
        if not (_plain(output, True) and _plain(inp, False) and inp.size and self._usable()):
            return False
        key = ("all_to_all_single", output.dtype, output.shape, inp.dtype, inp.shape)
        plan = self._cached(key, self._plan_all_to_all, output, inp)
        if plan is False:
            return False
        fp, h, datatype, carried = plan
        if carried is not None:  # every rank's whole input rides on the check
            mine, column = carried
            mine[...] = inp if inp.ndim == 1 else inp.reshape(-1)
            entry = self._begin("all_to_all", fp, h)
            output.reshape(column.shape)[...] = column
            self._end_call(entry)
            return True
        if _shares(inp, output):
            return False
        self._run("all_to_all", fp, h, self._engine.comm.Ialltoall, ([inp, datatype], [output, datatype]))
        return True

    def _plan_all_to_all(self, output: np.ndarray, inp: np.ndarray) -> Any:
        group = self._group
        size = group.size()
        o, i, _, _, even = all_to_all_single_buffers(self._rank, size, output, inp, None, None)
        if not even or o.count != i.count or i.count % size:
            return False  # (cached: this signature always takes the long path)
        fp, h = self._fingerprint("all_to_all", i, count=i.count)
        carried: Any = self._carry("all_to_all", fp, i.flat.dtype)
        if carried is not None:  # (this rank's block of every rank's record)
            block = i.count // size
            start = self._rank * block
            carried = (carried[0], self._agreement.table(i.flat.dtype, i.count)[:, start : start + block])
        return fp, h, runtime.element_type(i.flat.itemsize), carried
