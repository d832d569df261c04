"""The check that every rank of an MPI group called the same collective, and the small
calls that ride on it.

Owns: ``Agreement`` — one group's check. On groups of at most ``GATHER_MAX_WORLD`` ranks the
check is one MPI all_gather of a 64-byte record per rank: the call's 62-bit fingerprint hash,
then up to ``CARRY_BYTES`` of the call's data. Every rank sees every hash, so every rank
knows whether they agree. A small call of any collective puts its data in the record
(``record_bytes``: how much) and needs no second MPI call: all_reduce folds the gathered
records in rank order (the same result on every rank), broadcast copies the root's, reduce
folds on the root, gather copies every rank's on the root, scatter takes this rank's block
of the root's, all_gather every rank's, reduce_scatter folds this rank's block of every
rank's, all_to_all takes its block of each; a barrier is the check itself (no rank leaves
an all_gather before every rank entered it). Larger groups check with a 16-byte MAX
all_reduce of (h, -h) and carry nothing. Whether a call carries its data depends only on
what its fingerprint fixes (collective, byte count) and the group's size, so every rank
decides the same, whichever path (short, long, async) it takes. The check's MPI call is a
persistent collective (MPI 4's ``Allgather_init``; ``Iallgather`` before MPI 4): its buffers
never change, and starting it costs a fraction of issuing it anew. Must not know about the
API, groups' bookkeeping or how a mismatch is explained.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import runtime

#: Words (int64) in one rank's record: the hash, then the carried bytes.
WORDS = 8
#: Bytes of data a call may carry in the check.
CARRY_BYTES = (WORDS - 1) * 8
#: Groups up to this size check with an all_gather of records (O(size) bytes per rank);
#: larger ones with a 16-byte all_reduce.
GATHER_MAX_WORLD = 64
_MASK = (1 << 62) - 1


def record_bytes(op: str, count: int, itemsize: int, size: int) -> int | None:
    """The bytes one rank's record carries when a call of ``op`` rides on the check, from
    what its fingerprint fixes (``count`` elements of ``itemsize``, the group's ``size``),
    so that every rank decides alike: its array (all_reduce, broadcast, reduce, gather's
    block); every rank's blocks (all_gather: the whole output; reduce_scatter, all_to_all:
    the whole input); the root's blocks for every rank (scatter). None: the count does not
    fix the sizes (all_to_all's uneven and list forms, whose fingerprints count 0)."""
    if op == "scatter":
        return size * count * itemsize
    if op == "all_to_all" and count == 0:
        return None
    return count * itemsize


def fingerprint_hash(fp: Any) -> int:
    """62 bits of a fingerprint (Python's hash of a tuple of ints: the same in every process)."""
    return hash(tuple(fp)) & _MASK


class Agreement:
    """The check of one MPI group's calls (not thread-safe: the group runs one at a time)."""

    def __init__(self, comm: Any, size: int) -> None:
        self._comm = comm
        self.size = size
        self.gathers = size <= GATHER_MAX_WORLD
        self.record = np.zeros(WORDS, dtype=np.int64)
        self.records = np.zeros((size, WORDS), dtype=np.int64) if self.gathers else None
        #: every rank's hash, once gathered (empty where the check is an all_reduce)
        self._hashes: np.ndarray = self.records[:, 0] if self.records is not None else np.zeros(0, np.int64)
        self._pair = np.zeros(2, dtype=np.int64)
        mpi = runtime.load()
        self._in_place, self._max = mpi.IN_PLACE, mpi.MAX
        self._persistent = self._persistent_request(comm)

    def _persistent_request(self, comm: Any) -> Any:
        """The check as an MPI 4 persistent collective (made collectively, here, by every
        rank of the new group), or None where the MPI library predates them."""
        try:
            if self.gathers:
                return comm.Allgather_init(self.record, self.records)
            return comm.Allreduce_init(self._in_place, self._pair, self._max)
        except (AttributeError, NotImplementedError, runtime.load().Exception):
            return None

    def close(self) -> None:
        """Free the persistent request (not while a check is in flight: MPI may still use it)."""
        request, self._persistent = self._persistent, None
        if request is not None:
            try:
                request.Free()
            except Exception:  # noqa: BLE001 — MPI already finalized (interpreter exit)
                pass

    def carries(self, nbytes: int) -> bool:
        """Whether a call of ``nbytes`` rides on the check (the same answer on every rank)."""
        return self.gathers and nbytes <= CARRY_BYTES

    def start(self, h: int) -> Any:
        """Send this rank's hash (and whatever the caller put in ``record``): the request."""
        persistent = self._persistent
        if self.gathers:
            self.record[0] = h
            if persistent is None:
                return self._comm.Iallgather(self.record, self.records)
        else:
            pair = self._pair
            pair[0] = h
            pair[1] = -h
            if persistent is None:
                return self._comm.Iallreduce(self._in_place, pair, self._max)
        persistent.Start()
        return persistent

    def agreed(self, h: int) -> bool:
        """Once the request completed: whether every rank sent ``h``."""
        if self.gathers:
            return bool(self._hashes.tolist().count(h) == self.size)
        return bool(self._pair[0] == -self._pair[1] == h)

    def persistent(self) -> tuple[np.ndarray, np.ndarray, Any] | None:
        """(record, the gathered hashes, the persistent request) for a caller that writes
        ``start`` and ``agreed`` out (a short path), or None where they differ from that."""
        if not self.gathers or self._persistent is None:
            return None
        return self.record, self._hashes, self._persistent

    def table(self, dtype: np.dtype, count: int) -> np.ndarray:
        """Every rank's carried data as one (size, ``count``) array of ``dtype`` (a view)."""
        assert self.records is not None
        return self.records.view(np.uint8)[:, 8 : 8 + dtype.itemsize * count].view(dtype)

    def views(self, dtype: np.dtype, count: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """(this rank's carried data, every rank's carried data) as ``count`` items of
        ``dtype``: views into the records, made once per call signature."""
        assert self.records is not None
        nbytes = dtype.itemsize * count

        def carried(words: np.ndarray) -> np.ndarray:
            return words.view(np.uint8)[8 : 8 + nbytes].view(dtype)

        return carried(self.record), [carried(self.records[r]) for r in range(self.size)]


def fold(out: np.ndarray, rows: list[np.ndarray], kernel: Any) -> None:
    """``out`` = every rank's carried data folded in rank order by ``kernel``, finalized (AVG,
    PREMUL_SUM) as MPI's path would be."""
    if len(rows) == 1:
        out[...] = rows[0]
    else:
        kernel.combine_into(out, rows[0], rows[1])
        for row in rows[2:]:
            kernel.combine(out, row)
    if kernel.needs_finalize:
        kernel.finalize(out, len(rows))
