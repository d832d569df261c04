"""The flight recorder of one process group: its last N calls, and per-operation totals.

Owns: ``FlightRecorder`` — a ring of the group's most recent collective calls (seq, operation,
the fingerprint's dtype/count/root/algorithm, start and end times, state), a second ring of its
point-to-point operations (send/recv/isend/irecv, the peer's global rank, tag, bytes, times,
state; numbered in the order this rank posted them) with those still open, the call in flight
and the last one completed (what the stuck report publishes), and the running totals behind
``accord.comm_stats()`` (calls, bytes, total and longest time, failures per operation,
point-to-point operations included). It is
written on every call, so it is cheap: one small list and a few stores per call, no locks
(a call is recorded by the one thread that runs it; readers take a snapshot under the GIL; a
p2p operation may end in the transport's progress thread: its entry is its own, and the open
set is a dict, whose single operations the GIL keeps whole).
Must not know about stores, files, signals or the default world: dumping and publishing are
done by the layers above with what ``snapshot()`` and ``progress()`` return.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from ..arrays import DTYPE_NAMES
from ..transport.wire import Fingerprint

STARTED, COMPLETED, FAILED = "started", "completed", "failed"
DEFAULT_CAPACITY = 2000  # torch's flight recorder keeps 2000 entries by default too

_SPECIAL_SIZES = {"bfloat16": 2, "bytes": 1}  # not NumPy dtypes (or not with a fixed size)
#: Bytes per element of each fingerprint dtype code (codes not here, e.g. 0: no data, count 0)
_ITEMSIZE: dict[int, int] = {code: _SPECIAL_SIZES.get(name) or np.dtype(name).itemsize
                             for code, name in DTYPE_NAMES.items()}
_clock = time.monotonic


def itemsize(dtype_code: int) -> int:
    """Bytes per element of a fingerprint's dtype code (0 for no data)."""
    return _ITEMSIZE.get(dtype_code, 0)


# An entry is a list, for speed: [seq, op, fingerprint, start, end, state, error]
_SEQ, _OP, _FP, _START, _END, _STATE, _ERROR = range(7)
# A p2p entry: [n, op, peer (global rank; None: any source, until it is known), tag, nbytes,
# start, end, state, error]
_N, _POP, _PEER, _TAG, _NBYTES, _PSTART, _PEND, _PSTATE, _PERROR = range(9)
#: How many open p2p operations a progress post lists (the oldest first)
_OPEN_POSTED = 4


class FlightRecorder:
    """The last ``capacity`` calls of one group and the totals per operation."""

    __slots__ = ("capacity", "ring", "_stats", "current", "last_done", "last_failed",
                 "_wall_offset", "p2p_ring", "p2p_open", "_p2p_numbers", "p2p_ended",
                 "p2p_failed")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(1, int(capacity))
        self.ring: list[list[Any] | None] = [None] * self.capacity
        self._stats: dict[str, list[float]] = {}
        self.current: list[Any] | None = None  # the call in flight (None between calls)
        self.last_done: list[Any] | None = None  # the last call that completed
        self.last_failed: list[Any] | None = None  # the last call that raised
        self._wall_offset = time.time() - time.monotonic()
        self.p2p_ring: list[list[Any] | None] = [None] * self.capacity
        self.p2p_open: dict[int, list[Any]] = {}  # n → entry, for p2p operations not ended
        self._p2p_numbers = itertools.count(1)  # next() is atomic: isend may come from threads
        self.p2p_ended = 0
        self.p2p_failed: list[Any] | None = None  # the last p2p operation that failed

    def start(self, seq: int, op: str, fp: Fingerprint | None) -> list[Any]:
        """Record the start of call #seq; returns the entry to pass to ``end``."""
        entry = [seq, op, fp, _clock(), 0.0, STARTED, None]
        self.ring[seq % self.capacity] = self.current = entry
        return entry

    def end(self, entry: list[Any], error: BaseException | None = None) -> None:
        """Record that the call of ``entry`` ended (``error``: how it failed).

        Written for speed (it runs on every call): no helper calls on the way of a success.
        """
        now = entry[4] = _clock()
        took = now - entry[3]
        try:
            stats = self._stats[entry[1]]
        except KeyError:
            stats = self._stats[entry[1]] = [0, 0, 0.0, 0.0, 0]
        stats[0] += 1
        fp = entry[2]
        if fp is not None:
            stats[1] += fp[3] * _ITEMSIZE.get(fp[2], 0)
        stats[2] += took
        if took > stats[3]:
            stats[3] = took
        self.current = None
        if error is None:
            entry[5] = COMPLETED
            self.last_done = entry
            return
        entry[5] = FAILED
        self.last_failed = entry
        entry[6] = f"{type(error).__name__}: {error}"[:500]
        stats[4] += 1

    def p2p_start(self, op: str, peer: int | None, tag: int, nbytes: int) -> list[Any]:
        """Record a point-to-point operation posted to (or, for a receive, from) global rank
        ``peer`` (None: any source); returns the entry to pass to ``p2p_end``."""
        n = next(self._p2p_numbers)
        entry = [n, op, peer, tag, nbytes, _clock(), 0.0, STARTED, None]
        self.p2p_ring[n % self.capacity] = self.p2p_open[n] = entry
        return entry

    def p2p_end(self, entry: list[Any], error: BaseException | None = None,
                peer: int | None = None) -> None:
        """Record that the p2p operation of ``entry`` ended (``peer``: the source a receive
        from any rank got); a failed one moved no bytes."""
        if self.p2p_open.pop(entry[0], None) is None:  # entry[_N], written out (hot path)
            return  # ended already (the waiter and the progress thread both saw it)
        now = entry[6] = _clock()  # _PEND
        took = now - entry[5]  # _PSTART
        if peer is not None:
            entry[2] = peer  # _PEER
        self.p2p_ended += 1
        try:
            stats = self._stats[entry[1]]  # _POP
        except KeyError:
            stats = self._stats[entry[1]] = [0, 0, 0.0, 0.0, 0]
        stats[0] += 1
        stats[2] += took
        if took > stats[3]:
            stats[3] = took
        if error is None:
            entry[7] = COMPLETED  # _PSTATE
            stats[1] += entry[4]  # _NBYTES
            return
        entry[_PSTATE] = FAILED
        entry[_PERROR] = f"{type(error).__name__}: {error}"[:500]
        self.p2p_failed = entry
        stats[4] += 1

    def totals(self, op: str) -> list[float]:
        """The running totals of ``op`` ([calls, bytes, total s, longest s, failed]): the live
        list, which a compiled call (``one_round``) updates in place on success."""
        stats = self._stats.get(op)
        if stats is None:
            stats = self._stats[op] = [0, 0, 0.0, 0.0, 0]
        return stats

    def count(self, op: str, nbytes: int, took: float, failed: bool = False) -> None:
        """Add a call that is not in the collective ring to the totals."""
        stats = self._stats.get(op)
        if stats is None:
            stats = self._stats[op] = [0, 0, 0.0, 0.0, 0]
        stats[0] += 1
        stats[1] += nbytes
        stats[2] += took
        stats[3] = max(stats[3], took)
        stats[4] += bool(failed)

    # -- reading -------------------------------------------------------------------------------
    def describe(self, entry: list[Any] | None) -> dict[str, Any] | None:
        """One entry as plain data (JSON-ready), times as Unix seconds."""
        if entry is None:
            return None
        fp: Fingerprint | None = entry[_FP]
        item: dict[str, Any] = {"seq": entry[_SEQ], "op": entry[_OP], "state": entry[_STATE],
                                **self._times(entry[_START], entry[_END])}
        if fp is not None:
            item.update(dtype=DTYPE_NAMES.get(fp.dtype, "") if fp.dtype else "", count=fp.count,
                        root=fp.root, algo=fp.algo, op_code=fp.op,
                        nbytes=fp.count * _ITEMSIZE.get(fp.dtype, 0))
        if entry[_ERROR]:
            item["error"] = entry[_ERROR]
        return item

    def _times(self, started: float, ended: float) -> dict[str, float | None]:
        """start, end and duration_s as Unix seconds (end 0.0: not ended, None)."""
        start = started + self._wall_offset
        end = ended + self._wall_offset if ended else None
        return {"start": round(start, 6), "end": round(end, 6) if end else None,
                "duration_s": round(end - start, 6) if end else None}

    def entries(self) -> list[dict[str, Any]]:
        """The recorded calls, oldest first."""
        live = [e for e in list(self.ring) if e is not None]
        live.sort(key=lambda e: e[_SEQ])
        return [d for d in (self.describe(e) for e in live) if d is not None]

    def describe_p2p(self, entry: list[Any]) -> dict[str, Any]:
        """One p2p entry as plain data (JSON-ready), times as Unix seconds."""
        item: dict[str, Any] = {"n": entry[_N], "op": entry[_POP], "peer": entry[_PEER],
                                "tag": entry[_TAG], "nbytes": entry[_NBYTES],
                                "state": entry[_PSTATE],
                                **self._times(entry[_PSTART], entry[_PEND])}
        if entry[_PERROR]:
            item["error"] = entry[_PERROR]
        return item

    def p2p_entries(self) -> list[dict[str, Any]]:
        """The recorded p2p operations, in the order they were posted."""
        live = [e for e in list(self.p2p_ring) if e is not None]
        live.sort(key=lambda e: e[_N])
        return [self.describe_p2p(e) for e in live]

    def progress(self) -> dict[str, Any]:
        """Where this rank is on the group: the call in flight (or the one that failed, if
        that came after the last completed one), the last one completed, and the oldest p2p
        operations still open (with how many are), or else the last p2p operation that
        failed, if it failed after the last collective call ended."""
        current, done, failed = self.current, self.last_done, self.last_failed
        if current is None and failed is not None and (done is None or failed[_SEQ] > done[_SEQ]):
            current = failed
        post = {"current": self.describe(current), "last_done": self.describe(done)}
        open_ops = sorted(list(self.p2p_open.values()), key=lambda e: e[_N])
        if open_ops:
            post["p2p_open"] = [self.describe_p2p(e) for e in open_ops[:_OPEN_POSTED]]
            post["p2p_open_count"] = len(open_ops)
        elif self.p2p_failed is not None and (done is None or self.p2p_failed[_PEND] > done[_END]):
            post["p2p_failed"] = self.describe_p2p(self.p2p_failed)
        return post

    def stamp(self) -> tuple[int, int, int, int]:
        """A cheap token that changes whenever a call or a p2p operation starts or ends."""
        current, done = self.current, self.last_done
        return (current[_SEQ] if current is not None else 0,
                done[_SEQ] if done is not None else 0, len(self.p2p_open), self.p2p_ended)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per operation: calls, bytes, total_s, max_s, mean_s, failed."""
        out = {}
        for op, (calls, nbytes, total, longest, failed) in sorted(self._stats.items()):
            out[op] = {"calls": int(calls), "bytes": int(nbytes), "total_s": total,
                       "max_s": longest, "mean_s": total / calls if calls else 0.0,
                       "failed": int(failed)}
        return out
