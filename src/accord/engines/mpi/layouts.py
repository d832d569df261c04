"""Where MPI reads and writes a list of separate arrays: one message of MPI's v-forms over
the arrays where they lie, else one scratch buffer they are copied into or out of.

Owns: ``run_of`` (arrays that fill one buffer end to end, as the ``_into_tensor`` and
``_single`` forms' chunks do), ``placed`` (separate arrays as byte counts and byte offsets
from the lowest of them: what Iallgatherv, Igatherv, Iscatterv and Ialltoallv take, so that
MPI moves the data straight into or out of the user's arrays), the rules that decide whether
a placement is legal (no byte written twice, none read where it is written: MPI forbids
both; offsets MPI's int takes, or any offset where the MPI has large counts), and the copies
otherwise (``pieces``, ``spread``). MPI's derived datatypes reach separate arrays too
(``Create_hindexed`` from ``MPI.BOTTOM``, one per peer in Ialltoallw: the only collective
that takes a datatype per peer) but MPICH 5 moved them 4-5× slower than bytes at byte
offsets (64 KiB to 16 MiB, world 2); offsets need no datatype to make, cache or free. Must
not know which collective runs: ``algorithms`` decides that alike on every rank from what
the fingerprint fixes, whatever the arrays' addresses; only the message differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from . import runtime

_INT_MAX = (1 << 31) - 1
_EMPTY = np.empty(0, np.uint8)
_large: list[bool] = []  # [whether this MPI takes counts and offsets beyond an int]


def pieces(arrays: Sequence[np.ndarray], into: np.ndarray) -> None:
    """``arrays`` end to end into the front of ``into``."""
    offset = 0
    for array in arrays:
        into[offset : offset + array.size] = array
        offset += array.size


def spread(joined: np.ndarray, arrays: Sequence[np.ndarray]) -> None:
    """The front of ``joined`` back into ``arrays``, end to end (``pieces`` undone)."""
    offset = 0
    for array in arrays:
        array[...] = joined[offset : offset + array.size]
        offset += array.size


def chunks(joined: np.ndarray, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Views of ``joined`` shaped as ``arrays`` end to end (where each one's copy lies)."""
    views, offset = [], 0
    for array in arrays:
        views.append(joined[offset : offset + array.size])
        offset += array.size
    return views


def run_of(arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """The one 1-D array that ``arrays`` (1-D, contiguous, one dtype) fill end to end, or None."""
    if not arrays:
        return None
    first = arrays[0]
    if len(arrays) == 1:
        return first if first.flags.writeable else None
    base = first.base  # the chunks of one array (the _into_tensor / _single forms)
    if (
        type(base) is np.ndarray
        and base.ndim == 1
        and base.flags.c_contiguous
        and base.flags.writeable
        and base.dtype == first.dtype
        and base.size == sum(a.size for a in arrays)
        and base.__array_interface__["data"][0] == first.__array_interface__["data"][0]
        and all(a.base is base for a in arrays)
        and all(
            a.__array_interface__["data"][0] - first.__array_interface__["data"][0]
            == sum(b.nbytes for b in arrays[:i])
            for i, a in enumerate(arrays)
        )
    ):
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


# -- arrays where they lie ----------------------------------------------------------------------
Span = tuple[int, int]


def spans(arrays: Sequence[np.ndarray]) -> list[Span]:
    """Each array's (first byte's address, one past its last); (0, 0) for an empty one."""
    out = []
    for array in arrays:
        nbytes = array.nbytes
        if nbytes:
            start = array.__array_interface__["data"][0]
            out.append((start, start + nbytes))
        else:
            out.append((0, 0))
    return out


def disjoint(writes: Sequence[Span], reads: Sequence[Span] = ()) -> bool:
    """Whether no byte is in two of ``writes``, nor in one of ``writes`` and one of ``reads``
    (``reads`` may share bytes with each other): MPI's rule for one call's buffers."""
    marked = sorted([(s, e, True) for s, e in writes if e > s] + [(s, e, False) for s, e in reads if e > s])
    written = read = 0  # the furthest end of the writes, and of the reads, that start before
    for start, end, write in marked:
        if written > start or (write and read > start):
            return False
        if write:
            written = max(written, end)
        else:
            read = max(read, end)
    return True


def large_counts() -> bool:
    """Whether this MPI has MPI-4's large-count calls (mpi4py uses them for offsets beyond
    an int; an MPI without them refuses such offsets)."""
    if not _large:
        try:
            _large.append(runtime.load().Get_version() >= (4, 0))
        except Exception:  # noqa: BLE001 — an MPI that does not say: offsets that fit an int
            _large.append(False)
    return _large[0]


class Placed(NamedTuple):
    """A list of arrays as one v-form message: where the offsets start (bytes), each array's
    bytes and byte offset, and the arrays MPI reads or writes (the user's, or copies of them)."""

    base: np.ndarray
    counts: list[int]
    displs: list[int]
    arrays: Sequence[np.ndarray]

    def message(self, skip: int = -1) -> list[Any]:
        """The MPI message (block ``skip`` left out: a rank's own, copied by the caller)."""
        counts = self.counts
        if skip >= 0:
            counts = counts.copy()
            counts[skip] = 0
        return [self.base, counts, self.displs, runtime.load().BYTE]


def placed(arrays: Sequence[np.ndarray], where: Sequence[Span] | None = None) -> Placed | None:
    """``arrays`` (1-D, C-contiguous) where they lie, as offsets from the lowest; None where an
    offset is more than this MPI takes. ``where``: their ``spans``, if known."""
    where = spans(arrays) if where is None else where
    starts = [s for s, e in where if e > s]
    if not starts:
        return Placed(_EMPTY, [0] * len(arrays), [0] * len(arrays), arrays)
    low = min(starts)
    if max(e for _, e in where) - low > _INT_MAX and not large_counts():
        return None
    lowest = arrays[[s for s, _ in where].index(low)]
    return Placed(
        lowest.view(np.uint8), [e - s for s, e in where], [s - low if e > s else 0 for s, e in where], arrays
    )


def blocks(size: int, nbytes: int, skip: int = -1) -> tuple[list[int], list[int]]:
    """(bytes, byte offsets) of ``size`` blocks of ``nbytes`` end to end, block ``skip``
    left out (a rank's own, which the caller copies or uses where it lies)."""
    counts = [nbytes] * size
    if skip >= 0:
        counts[skip] = 0
    return counts, [j * nbytes for j in range(size)]


def joined(arrays: Sequence[np.ndarray], scratch: np.ndarray) -> Placed:
    """``arrays`` as one message over ``scratch`` (the caller copies into or out of it)."""
    counts = [a.nbytes for a in arrays]
    displs = [0] * len(counts)
    for i in range(1, len(counts)):
        displs[i] = displs[i - 1] + counts[i - 1]
    return Placed(scratch.view(np.uint8) if scratch.size else _EMPTY, counts, displs, chunks(scratch, arrays))


def reach(
    arrays: Sequence[np.ndarray],
    writes: bool,
    other: Sequence[Span] = (),
    where: Sequence[Span] | None = None,
) -> Placed | None:
    """``arrays`` where they lie (``where``: their ``spans``, if known), for a call that
    writes into them (``writes``) or reads them, and reads or writes ``other``: None where
    MPI may not (a byte written twice, or read where it is written) or cannot (offsets too
    large) reach them."""
    where = spans(arrays) if where is None else where
    legal = disjoint(where, other) if writes else disjoint(other, where)
    return placed(arrays, where) if legal else None


def sent(call: Any, arrays: Sequence[np.ndarray], which: int, written: Sequence[Span] = ()) -> Placed:
    """The message that sends ``arrays``: where they lie (``reach``, the call writing
    ``written``), else a copy in scratch ``which``."""
    found = reach(arrays, False, written)
    if found is not None:
        return found
    scratch = call.scratch(sum(a.size for a in arrays), arrays[0].dtype, which)
    pieces(arrays, scratch)
    return joined(arrays, scratch)


def received(
    call: Any,
    arrays: Sequence[np.ndarray],
    which: int,
    read: Sequence[Span] = (),
    where: Sequence[Span] | None = None,
) -> tuple[Placed, Any]:
    """(the message that receives into ``arrays``, what copies it into them afterwards or
    None): where they lie (``reach``, the call reading ``read``), else scratch ``which``,
    spread afterwards."""
    found = reach(arrays, True, read, where)
    if found is not None:
        return found, None
    scratch = call.scratch(sum(a.size for a in arrays), arrays[0].dtype, which)
    return joined(arrays, scratch), lambda: spread(scratch, arrays)
