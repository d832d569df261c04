"""The short path of the list form of all_gather on an MPI group (``all_gather(tensor_list,
tensor)``): per call signature, the plan the long path would make (its argument checks,
fingerprint and decisions), and per call only the check and MPI's collective on the user's
arrays where they lie.

Owns: ``ListForms``, a mixin of ``DirectPath``. A small call rides on the check, as on the
long path (``agreement.record_bytes``); a call of large blocks (``algorithms.PLACED_BYTES``
and up, or uneven ones) is one ``Iallgatherv`` into the output arrays at their byte offsets
from the lowest (``layouts.placed``), as ``algorithms.all_gather`` makes it. What that does
not cover — even blocks under ``PLACED_BYTES`` (the long path's ``Iallgather`` through
scratch), outputs that overlap each other or the input (MPI forbids it; the long path
copies, or goes in place), arrays that are not plain — returns False before the call is
numbered: the long path takes it and makes the same MPI call, so ranks on either path meet.
At 16 MiB, world 2, the long path's own Python cost ~100 µs on a 1.2 ms call (MPICH's
``Allgather``: 1.22 ms; the long path 1.38–1.42). Must not know about the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...group.arguments import all_gather_buffers
from ...group.recorder import CallRecord
from . import layouts, runtime
from .algorithms import PLACED_BYTES

_NDARRAY = np.ndarray


def _plain_list(arrays: Any, size: int) -> tuple[Any, ...] | None:
    """The signature (dtype, size of each) of ``size`` plain, writable arrays, else None."""
    if (type(arrays) is not list and type(arrays) is not tuple) or len(arrays) != size:
        return None
    signature: list[Any] = []
    for array in arrays:
        if type(array) is not _NDARRAY:
            return None
        flags = array.flags
        if not (flags.c_contiguous and flags.writeable):
            return None
        signature += (array.dtype, array.size)
    return tuple(signature)


class ListForms:
    """The short path of all_gather's list form (a mixin of ``DirectPath``, which provides
    ``_group``, ``_engine``, ``_rank``, ``_usable``, ``_cached``, ``_fingerprint``,
    ``_carry``, ``_begin``, ``_end_call`` and ``_run``)."""

    _group: Any
    _engine: Any
    _rank: int
    _usable: Callable[[], bool]
    _cached: Callable[..., Any]
    _fingerprint: Callable[..., tuple[Any, int]]
    _carry: Callable[..., Any]
    _begin: Callable[..., CallRecord]
    _end_call: Callable[[CallRecord], None]
    _run: Callable[..., None]

    def all_gather(self, outputs: Any, inp: Any) -> bool:
        """``outputs[i]`` gets rank i's ``inp``; False: take the long path."""
        if type(inp) is not _NDARRAY or not inp.flags.c_contiguous or not inp.size or not self._usable():
            return False
        signature = _plain_list(outputs, self._group.size())
        if signature is None:
            return False
        plan = self._cached(
            ("all_gather", inp.dtype, inp.size, signature), self._plan_all_gather_list, outputs, inp
        )
        if plan is False:
            return False
        fp, h, carried, placed = plan
        flat = inp if inp.ndim == 1 else inp.reshape(-1)
        if carried is not None:  # every rank's block rides on the check
            mine, rows = carried
            mine[: flat.size] = flat
            entry = self._begin("all_gather", fp, h)
            for out, row in zip(outputs, rows):
                (out if out.ndim == 1 else out.reshape(-1))[...] = row[: out.size]
            self._end_call(entry)
            return True
        if not placed:
            return False  # even small blocks: the long path's Iallgather through scratch
        where = layouts.spans(outputs)
        if not layouts.disjoint(where, layouts.spans([flat])):
            return False  # MPI forbids it: the long path copies the input, or goes in place
        into = layouts.placed(outputs, where)
        if into is None:
            return False  # offsets beyond what this MPI takes: the long path's scratch
        self._run(
            "all_gather", fp, h, self._engine.comm.Iallgatherv, (runtime.as_bytes(flat), into.message())
        )
        return True

    def _plan_all_gather_list(self, outputs: list[np.ndarray], inp: np.ndarray) -> tuple[Any, ...]:
        """(fingerprint, its hash, the record's views if the call rides on the check, whether
        its blocks go by Iallgatherv) as ``collective_ops.all_gather`` and
        ``algorithms.all_gather`` decide them (the argument checks raise the same errors)."""
        i, outs = all_gather_buffers(self._rank, self._group.size(), outputs, inp)
        total = sum(o.count for o in outs)
        fp, h = self._fingerprint("all_gather", i, count=total)
        carried = self._carry("all_gather", fp, i.flat.dtype)
        placed = not (outs[0].nbytes < PLACED_BYTES and all(o.count == i.count for o in outs))
        return fp, h, carried, placed
