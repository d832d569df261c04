"""The flight recorder of one process group: its last N calls, and per-operation totals.

Owns: ``FlightRecorder`` — a ring of the group's most recent collective calls (seq, operation,
the fingerprint's dtype/count/root/algorithm, start and end times, state), a second ring of its
point-to-point operations (send/recv/isend/irecv, the peer's global rank, tag, bytes, times,
state; numbered in the order this rank posted them) with those still open, the call in flight
and the last one completed (what the stuck report publishes), and the running totals behind
``accord.comm_stats()`` (calls, bytes, total and longest time, failures per operation,
point-to-point operations included), and the typed records of both (``CallRecord``,
written only by the group's ``calls.CallSequencer``, which runs the calls; ``P2pRecord``,
written only here). It is
written on every call, so it is cheap: one small slotted object and a few stores per call, no locks
(a call is recorded by the one thread that runs it; readers take a snapshot under the GIL; a
p2p operation may end in the transport's progress thread: its record is its own, and the open
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
ITEMSIZE: dict[int, int] = {
    code: _SPECIAL_SIZES.get(name) or np.dtype(name).itemsize for code, name in DTYPE_NAMES.items()
}
_clock = time.monotonic


#: How many open p2p operations a progress post lists (the oldest first)
_OPEN_POSTED = 4


class CallRecord:
    """One collective call in the flight recorder (and the ticket its runner holds: the
    group's ``calls.begin`` makes it, ``calls.end``/``calls.fail`` close it). Only
    ``calls.CallSequencer`` writes its fields."""

    __slots__ = ("seq", "op", "fp", "started", "ended", "error")

    def __init__(self, seq: int, op: str, fp: Fingerprint | None, started: float) -> None:
        self.seq = seq
        self.op = op
        self.fp = fp
        self.started = started  # monotonic seconds
        self.ended = 0.0  # monotonic seconds; 0.0: not ended
        self.error: str | None = None  # how it failed ("Class: message")

    @property
    def state(self) -> str:
        """STARTED, COMPLETED or FAILED."""
        if not self.ended:
            return STARTED
        return COMPLETED if self.error is None else FAILED

    def __repr__(self) -> str:
        return f"<CallRecord {self.op} #{self.seq} {self.state}>"


class P2pRecord:
    """One point-to-point operation in the flight recorder, numbered in the order this rank
    posted them (``peer``: the global rank; None: any source, until it is known)."""

    __slots__ = ("n", "op", "peer", "tag", "nbytes", "started", "ended", "state", "error")

    def __init__(self, n: int, op: str, peer: int | None, tag: int, nbytes: int, started: float) -> None:
        self.n = n
        self.op = op
        self.peer = peer
        self.tag = tag
        self.nbytes = nbytes
        self.started = started
        self.ended = 0.0
        self.state = STARTED
        self.error: str | None = None

    def __repr__(self) -> str:
        return f"<P2pRecord {self.op} #{self.n} peer {self.peer} {self.state}>"


class FlightRecorder:
    """The last ``capacity`` calls of one group and the totals per operation."""

    __slots__ = (
        "capacity",
        "ring",
        "stats_by_op",
        "current",
        "last_done",
        "last_failed",
        "_wall_offset",
        "p2p_ring",
        "p2p_open",
        "_p2p_numbers",
        "p2p_ended",
        "p2p_failed",
    )

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(1, int(capacity))
        self.ring: list[CallRecord | None] = [None] * self.capacity
        #: per operation: [calls, bytes, total s, longest s, failed] (``totals``)
        self.stats_by_op: dict[str, list[float]] = {}
        self.current: CallRecord | None = None  # the call in flight (None between calls)
        self.last_done: CallRecord | None = None  # the last call that completed
        self.last_failed: CallRecord | None = None  # the last call that raised
        self._wall_offset = time.time() - time.monotonic()
        self.p2p_ring: list[P2pRecord | None] = [None] * self.capacity
        self.p2p_open: dict[int, P2pRecord] = {}  # n → record, for p2p operations not ended
        self._p2p_numbers = itertools.count(1)  # next() is atomic: isend may come from threads
        self.p2p_ended = 0
        self.p2p_failed: P2pRecord | None = None  # the last p2p operation that failed

    def p2p_start(self, op: str, peer: int | None, tag: int, nbytes: int) -> P2pRecord:
        """Record a point-to-point operation posted to (or, for a receive, from) global rank
        ``peer`` (None: any source); returns the record to pass to ``p2p_end``."""
        n = next(self._p2p_numbers)
        record = P2pRecord(n, op, peer, tag, nbytes, _clock())
        self.p2p_ring[n % self.capacity] = self.p2p_open[n] = record
        return record

    def p2p_end(self, record: P2pRecord, error: BaseException | None = None, peer: int | None = None) -> None:
        """Record that the p2p operation of ``record`` ended (``peer``: the source a receive
        from any rank got); a failed one moved no bytes."""
        if self.p2p_open.pop(record.n, None) is None:
            return  # ended already (the waiter and the progress thread both saw it)
        now = record.ended = _clock()
        took = now - record.started
        if peer is not None:
            record.peer = peer
        self.p2p_ended += 1
        try:
            stats = self.stats_by_op[record.op]
        except KeyError:
            stats = self.stats_by_op[record.op] = [0, 0, 0.0, 0.0, 0]
        stats[0] += 1
        stats[2] += took
        if took > stats[3]:
            stats[3] = took
        if error is None:
            record.state = COMPLETED
            stats[1] += record.nbytes
            return
        record.state = FAILED
        record.error = f"{type(error).__name__}: {error}"[:500]
        self.p2p_failed = record
        stats[4] += 1

    def totals(self, op: str) -> list[float]:
        """The running totals of ``op`` ([calls, bytes, total s, longest s, failed]): the live
        list, which the group's ``calls`` updates in place as calls end."""
        try:
            return self.stats_by_op[op]
        except KeyError:
            stats = self.stats_by_op[op] = [0, 0, 0.0, 0.0, 0]
            return stats

    def count(self, op: str, nbytes: int, took: float, failed: bool = False) -> None:
        """Add a call that is not in the collective ring to the totals."""
        stats = self.stats_by_op.get(op)
        if stats is None:
            stats = self.stats_by_op[op] = [0, 0, 0.0, 0.0, 0]
        stats[0] += 1
        stats[1] += nbytes
        stats[2] += took
        stats[3] = max(stats[3], took)
        stats[4] += bool(failed)

    # -- reading -------------------------------------------------------------------------------
    def describe(self, record: CallRecord | None) -> dict[str, Any] | None:
        """One record as plain data (JSON-ready), times as Unix seconds."""
        if record is None:
            return None
        fp = record.fp
        item: dict[str, Any] = {
            "seq": record.seq,
            "op": record.op,
            "state": record.state,
            **self._times(record.started, record.ended),
        }
        if fp is not None:
            item.update(
                dtype=DTYPE_NAMES.get(fp.dtype, "") if fp.dtype else "",
                count=fp.count,
                root=fp.root,
                algo=fp.algo,
                op_code=fp.op,
                nbytes=fp.count * ITEMSIZE.get(fp.dtype, 0),
            )
        if record.error:
            item["error"] = record.error
        return item

    def _times(self, started: float, ended: float) -> dict[str, float | None]:
        """start, end and duration_s as Unix seconds (end 0.0: not ended, None)."""
        start = started + self._wall_offset
        end = ended + self._wall_offset if ended else None
        return {
            "start": round(start, 6),
            "end": round(end, 6) if end else None,
            "duration_s": round(end - start, 6) if end else None,
        }

    def entries(self) -> list[dict[str, Any]]:
        """The recorded calls, oldest first."""
        live = [r for r in list(self.ring) if r is not None]
        live.sort(key=lambda r: r.seq)
        return [d for d in (self.describe(r) for r in live) if d is not None]

    def describe_p2p(self, record: P2pRecord) -> dict[str, Any]:
        """One p2p record as plain data (JSON-ready), times as Unix seconds."""
        item: dict[str, Any] = {
            "n": record.n,
            "op": record.op,
            "peer": record.peer,
            "tag": record.tag,
            "nbytes": record.nbytes,
            "state": record.state,
            **self._times(record.started, record.ended),
        }
        if record.error:
            item["error"] = record.error
        return item

    def p2p_entries(self) -> list[dict[str, Any]]:
        """The recorded p2p operations, in the order they were posted."""
        live = [r for r in list(self.p2p_ring) if r is not None]
        live.sort(key=lambda r: r.n)
        return [self.describe_p2p(r) for r in live]

    def progress(self) -> dict[str, Any]:
        """Where this rank is on the group: the call in flight (or the one that failed, if
        that came after the last completed one), the last one completed, and the oldest p2p
        operations still open (with how many are), or else the last p2p operation that
        failed, if it failed after the last collective call ended."""
        current, done, failed = self.current, self.last_done, self.last_failed
        if current is None and failed is not None and (done is None or failed.seq > done.seq):
            current = failed
        post: dict[str, Any] = {"current": self.describe(current), "last_done": self.describe(done)}
        # (a list first: the progress thread may end an operation while this sorts)
        open_ops = sorted(list(self.p2p_open.values()), key=lambda r: r.n)  # noqa: C414
        if open_ops:
            post["p2p_open"] = [self.describe_p2p(r) for r in open_ops[:_OPEN_POSTED]]
            post["p2p_open_count"] = len(open_ops)
        elif self.p2p_failed is not None and (done is None or self.p2p_failed.ended > done.ended):
            post["p2p_failed"] = self.describe_p2p(self.p2p_failed)
        return post

    def stamp(self) -> tuple[int, int, int, int]:
        """A cheap token that changes whenever a call or a p2p operation starts or ends."""
        current, done = self.current, self.last_done
        return (
            current.seq if current is not None else 0,
            done.seq if done is not None else 0,
            len(self.p2p_open),
            self.p2p_ended,
        )

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per operation: calls, bytes, total_s, max_s, mean_s, failed."""
        out = {}
        for op, (calls, nbytes, total, longest, failed) in sorted(self.stats_by_op.items()):
            out[op] = {
                "calls": int(calls),
                "bytes": int(nbytes),
                "total_s": total,
                "max_s": longest,
                "mean_s": total / calls if calls else 0.0,
                "failed": int(failed),
            }
        return out
