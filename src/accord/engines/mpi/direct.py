"""The short path of blocking collectives on an MPI group: all_reduce, broadcast and
barrier here, the rooted calls and the exchanges in ``direct_rooted_exchanges``, all_gather's
list form in ``direct_lists``.

Owns: per call signature (op, dtype, count, root), the plan the long path would make once —
fingerprint, MPI datatype and op, kernel, whether the call's data rides on the check — and
then, per call, only what must happen: the sequence number, the flight recorder's entry, the
check that every rank called the same (``agreement``: with the data of a small call in it),
MPI's call and a test loop. It applies to C-contiguous NumPy
arrays while torch's profiler is not recording, the group is healthy and the call blocking;
anything else returns False and takes the long path, which explains what is wrong. Must
not know about the API.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import profiling
from ...arrays import as_buffer
from ...group.recorder import CallRecord
from ...reduce_ops import as_reduce_op, make_kernel
from ...timeouts import Deadline
from ...transport.wire import Fingerprint
from . import runtime
from .agreement import fingerprint_hash, fold
from .algorithms import ALGORITHMS
from .direct_lists import ListForms
from .direct_rooted_exchanges import RootedAndExchanges

_NDARRAY = np.ndarray
_modules_get = sys.modules.get
_SPINS = 200  # tests before a deadline is even made
_PROFILER = profiling.TORCH_PROFILER
_IN_PLACE = runtime.load().IN_PLACE
_ARRIVAL = "the ranks' arrival at this call (accord's check before MPI's collective)"


class DirectPath(RootedAndExchanges, ListForms):
    """The short paths of one group on MPI (``MpiEngine``); the rooted calls' and the
    exchanges' are ``RootedAndExchanges``'."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._group = group = engine.group
        self._calls = group.calls
        self._begin_call: Callable[[str, Fingerprint | None], CallRecord] = group.calls.begin  # (bound once)
        self._end_call: Callable[[CallRecord], None] = group.calls.end
        self._rank = group.rank()
        self._plans: dict[Any, Any] = {}
        self._agreement = engine.agreement
        self._in_place = _IN_PLACE
        self._byte = runtime.load().BYTE

    def _usable(self) -> bool:
        if self._calls.broken is not None or self._engine.destroyed or self._engine.unstarted:
            return False  # (an async call not started yet: the long path starts after it)
        prof = _modules_get(profiling.TORCH_PROFILER)
        return prof is None or not profiling.recording()

    def all_reduce(self, tensor: Any, op: Any) -> bool:
        if type(tensor) is not _NDARRAY:
            return False
        flags = tensor.flags
        group = self._group
        if (
            not (flags.c_contiguous and flags.writeable)
            or self._calls.broken is not None
            or self._engine.unstarted
            or self._engine.destroyed
            or (_modules_get(_PROFILER) is not None and profiling.recording())
        ):
            return False
        key = (op, tensor.dtype, tensor.size)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan_all_reduce(tensor, op)
        fp, h, datatype, mpi_op, kernel, carried, begin, end = plan
        flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
        entry = begin()  # (_begin less the check: it may ride on the data)
        if carried is not None:  # the data rides on the check: one MPI call, folded here
            mine, rows, pairwise, persistent = carried
            mine[...] = flat
            if persistent is not None:  # _check written out
                record, hashes, request = persistent
                record[0] = h
                request.Start()
                test = request.Test
                if not (test() or test() or test()):  # (the call to _wait costs, here)
                    self._wait(entry, request, _ARRIVAL)
                if hashes.tolist().count(h) != len(rows):
                    self._mismatch(entry, entry.seq, fp)
            else:
                self._check(entry, h)
            if pairwise is not None:
                pairwise(rows[0], rows[1], out=flat)  # fold's commonest case, written out
            else:
                fold(flat, rows, kernel)
            end(entry)
            return True
        if self._engine.checks:
            self._check(entry, h)
        request = self._engine.comm.Iallreduce(_IN_PLACE, [flat, datatype], mpi_op)
        if not request.Test():
            self._wait(entry, request, "the MPI collective")
        end(entry)
        if kernel.needs_finalize:
            kernel.finalize(flat, group.size())
        return True

    def _plan_all_reduce(self, tensor: np.ndarray, op: Any) -> tuple[Any, ...]:
        buf = as_buffer(tensor, writable=True)
        kernel = make_kernel(as_reduce_op(op), buf.flat.dtype, buf.dtype_name)
        fp = self._group.fingerprint("all_reduce", ALGORITHMS["all_reduce"], buf)
        carried = self._carried(buf.flat)
        if carried is not None:
            mine, rows = carried
            pairwise = kernel.ufunc if len(rows) == 2 and not kernel.needs_finalize else None
            carried = (mine, rows, pairwise, self._agreement.persistent())
        ticket = self._calls.ticket("all_reduce", fp)
        return (fp, fingerprint_hash(fp), *runtime.reduction(buf.flat, kernel), kernel, carried, *ticket)

    def _carried(self, flat: np.ndarray) -> Any:
        """(this rank's record's data, every rank's) when a call like ``flat`` rides on the
        check, else None."""
        agreement = self._agreement
        if not (self._engine.checks and agreement.carries(flat.nbytes)):
            return None
        return agreement.views(flat.dtype, flat.size)

    def broadcast(self, tensor: Any, src: int) -> bool:
        if type(tensor) is not _NDARRAY:
            return False
        flags = tensor.flags
        if (
            not (flags.c_contiguous and (flags.writeable or self._rank == src))
            or self._calls.broken is not None
            or self._engine.destroyed
            or self._engine.unstarted
            or (_modules_get(_PROFILER) is not None and profiling.recording())
        ):
            return False
        plan = self._plans.get(("broadcast", src, tensor.dtype, tensor.size))
        if plan is None:
            plan = self._plan_broadcast(tensor, src)
        fp, h, datatype, carried, begin, end = plan
        flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
        entry = begin()  # (_begin less the check: it may ride on the data)
        if carried is not None:  # the root's data rides on the check
            mine, root_row, persistent, size = carried
            if self._rank == src:
                mine[...] = flat
            if persistent is not None:  # _check written out
                record, hashes, request = persistent
                record[0] = h
                request.Start()
                test = request.Test
                if not (test() or test() or test()):  # (the call to _wait costs, here)
                    self._wait(entry, request, _ARRIVAL)
                if hashes.tolist().count(h) != size:
                    self._mismatch(entry, entry.seq, fp)
            else:
                self._check(entry, h)
            if self._rank != src:
                flat[...] = root_row
            end(entry)
            return True
        message = [flat, datatype] if datatype is not None else runtime.as_bytes(flat)
        if self._engine.checks:
            self._check(entry, h)
        request = self._engine.comm.Ibcast(message, src)
        if not request.Test():
            self._wait(entry, request, "the MPI collective")
        end(entry)
        return True

    def _plan_broadcast(self, tensor: np.ndarray, src: int) -> tuple[Any, ...]:
        group = self._group
        buf = as_buffer(tensor, writable=group.rank() != src)
        fp = group.fingerprint("broadcast", ALGORITHMS["broadcast"], buf, src)
        # MPI moves the elements as opaque items of their size (no byte view per call)
        carried = self._carried(buf.flat)
        if carried is not None:
            mine, rows = carried
            carried = (mine, rows[src], self._agreement.persistent(), len(rows))
        plan = self._plans[("broadcast", src, tensor.dtype, tensor.size)] = (
            fp,
            fingerprint_hash(fp),
            runtime.element_type(buf.flat.itemsize) if buf.flat.size else None,
            carried,
            *self._calls.ticket("broadcast", fp),
        )
        return plan

    def barrier(self) -> bool:
        if not self._usable():
            return False
        plan = self._plans.get("barrier")
        if plan is None:
            fp = self._group.fingerprint("barrier", ALGORITHMS["barrier"], None)
            plan = self._plans["barrier"] = (fp, fingerprint_hash(fp), *self._calls.ticket("barrier", fp))
        fp, h, begin, end = plan
        entry = begin()
        if self._engine.checks:  # no rank leaves the check before every rank entered it
            self._check(entry, h)
            end(entry)
        else:
            self._finish(entry, self._engine.comm.Ibarrier())
        return True

    # -- one call ---------------------------------------------------------------------------
    def _begin(self, op: str, fp: Fingerprint, h: int) -> CallRecord:
        """Number the call, record it, and check that every rank called the same."""
        entry = self._begin_call(op, fp)
        if self._engine.checks:
            self._check(entry, h)
        return entry

    def _run(self, op: str, fp: Fingerprint, h: int, start: Any, args: tuple[Any, ...]) -> None:
        """One call not carried by the check: number and record it, check that every rank
        called the same, then ``start(*args)`` (MPI's nonblocking collective) and wait."""
        entry = self._begin(op, fp, h)
        try:
            request = start(*args)
        except BaseException as exc:  # MPI refused the call: as the long path fails
            self._calls.fail(entry, exc)
            raise
        if not request.Test():
            self._wait(entry, request, "the MPI collective")
        self._end_call(entry)

    def _check(self, entry: CallRecord, h: int) -> None:
        """Every rank called the same (sent the same hash), else the mismatch error."""
        agreement = self._agreement
        request = agreement.start(h)
        if not request.Test():
            self._wait(entry, request, _ARRIVAL)
        if not agreement.agreed(h):
            fp = entry.fp
            assert fp is not None  # (every checked call has its fingerprint)
            self._mismatch(entry, entry.seq, fp)

    def _finish(self, entry: CallRecord, request: Any) -> None:
        if not request.Test():
            self._wait(entry, request, "the MPI collective")
        self._end_call(entry)

    def _wait(self, entry: CallRecord, request: Any, what: str) -> None:
        test = request.Test
        for _ in range(_SPINS):
            if test():
                return
        calls = self._calls
        deadline = calls.deadline(entry)
        if runtime.wait_until(test, deadline):
            return
        exc = runtime.timed_out(calls.context(entry.op, entry.seq), deadline, what)
        self._engine.abandon([request], None)
        calls.fail(entry, exc)
        raise exc

    def _mismatch(self, entry: CallRecord, seq: int, fp: Fingerprint) -> None:
        try:
            self._engine.explain_mismatch(seq, fp, Deadline.after(self._calls.timeout))
        except BaseException as exc:
            self._calls.fail(entry, exc, breaks=False)
            raise
