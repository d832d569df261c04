"""A group's call state behind one public interface: ``CallSequencer``.

Owns, for one process group: the numbers of its calls (``number``; ``last_seq``), whose turn
it is (``finished``, ``await_turn``: calls run one at a time, in the order they were made, so
a blocking call made after an async one waits for it), the call's flight-recorder record,
which is also the call's ticket (``start``/``begin`` open it, ``end``/``fail`` close it and
hand the turn on: this is the one writer of a ``CallRecord``; the recorder keeps and reads
them), whether the group is broken and why (``broken``, ``break_group``), the timeout a
call's deadline counts (``timeout``, ``deadline``), the group's queue of async calls not yet
run (``queue``) and its scratch memory (``scratch``).

Every module that runs a call — the general path (``ProcessGroup``), the compiled
shared-memory rounds (``one_round``), backend mpi's short paths — goes through this
interface; none touches a group's private attributes. It is as cheap as what it replaced:
the short paths read the public fields (``finished``, ``last_seq``, ``broken``) and make
two calls per call (``begin``, ``end``; or a plan's ``ticket``, the same made for one
operation and fingerprint).

What breaking means for an engine (telling the peers, breaking inner groups) is its own:
it gives ``on_break``; the world's monitor, which explains a failure before anything is
told to the peers, is ``explain``. Must not know about the transport, shared memory, MPI,
the API or torch.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import DistTimeoutError
from ..timeouts import Deadline
from ..transport.wire import Fingerprint
from .recorder import ITEMSIZE, CallRecord, FlightRecorder
from .scratch import Scratch

_clock = time.monotonic

#: explain(context, exc): the world's monitor, told first when the group breaks (it may add
#: to a timeout's message: a stuck report)
Explain = Callable[[str, BaseException], None]
#: on_break(context, exc): what breaking means to the engine (tell peers, break inner groups)
OnBreak = Callable[[str, BaseException], None]
#: A ticket's two halves (``CallSequencer.ticket``): open a call's record, close it
Begin = Callable[[], CallRecord]
End = Callable[[CallRecord], None]


class CallSequencer:
    """The call state of one process group (see the module docstring)."""

    __slots__ = (
        "recorder",
        "scratch",
        "queue",
        "timeout",
        "last_seq",
        "finished",
        "broken",
        "where",
        "explain",
        "on_break",
        "_seqs",
        "_turn",
        "_turn_waiters",
        "_ring",
        "_capacity",
        "_stats",
        "_moved",
    )

    def __init__(
        self,
        timeout: float,
        where: str,
        recorder: FlightRecorder,
        queue: Any = None,
        on_break: OnBreak | None = None,
    ) -> None:
        self.recorder = recorder
        self.scratch = Scratch()
        #: the group's queue of async calls (``executor.AsyncExecutor``; None: the engine
        #: keeps its own), which a call made after them runs first
        self.queue = queue
        self.timeout = timeout  # seconds: a call's deadline unless the call names another
        self.last_seq = 0  # the number of the last call numbered (async ones included)
        self.finished = 0  # the number of the last call that ended: the turn is last_seq's + 1
        self.broken: str | None = None  # why the group cannot be used any more (None: it can)
        self.where = where  # 'rank 3', or 'rank 3 (group 'tp', group rank 1)'
        self.explain: Explain | None = None
        self.on_break = on_break
        self._seqs = itertools.count(1)  # next() is atomic under the GIL: call numbers
        self._turn = threading.Condition()
        self._turn_waiters = 0
        # the recorder's ring and totals, which only this object writes for calls
        self._ring, self._capacity, self._stats = recorder.ring, recorder.capacity, recorder.stats_by_op
        self._moved: tuple[Any, int] = (None, 0)  # (the last fingerprint ended, its bytes)

    def context(self, op: str, seq: int | None = None) -> str:
        """'all_reduce #12 on rank 2', plus the group and group rank for subgroups."""
        return f"{op} on {self.where}" if seq is None else f"{op} #{seq} on {self.where}"

    # -- one call ----------------------------------------------------------------------------
    def number(self) -> int:
        """The next call's number (a call takes it when it starts: see ``await_turn``)."""
        seq = self.last_seq = next(self._seqs)
        return seq

    def start(self, seq: int, op: str, fp: Fingerprint | None) -> CallRecord:
        """Call #seq starts (its turn has come): its record, the ticket ``end``/``fail`` take."""
        record = CallRecord(seq, op, fp, _clock())
        self._ring[seq % self._capacity] = self.recorder.current = record
        return record

    def begin(self, op: str, fp: Fingerprint | None) -> CallRecord:
        """``number`` and ``start`` in one, for a caller that knows the turn is its own
        (``finished == last_seq``: nothing queued or running before it)."""
        seq = self.last_seq = next(self._seqs)
        record = CallRecord(seq, op, fp, _clock())
        self._ring[seq % self._capacity] = self.recorder.current = record
        return record

    def end(self, record: CallRecord) -> None:
        """The call of ``record`` completed: record it (the recorder's totals too), hand the
        turn on. (Written out: it runs on every call.)"""
        now = record.ended = _clock()
        took = now - record.started
        try:
            stats = self._stats[record.op]
        except KeyError:
            stats = self.recorder.totals(record.op)
        fp = record.fp
        moved = self._moved
        if moved[0] is not fp:  # (a planned call ends with the same fingerprint each time)
            moved = self._moved = (fp, 0 if fp is None else fp[3] * ITEMSIZE.get(fp[2], 0))
        stats[0] += 1
        stats[1] += moved[1]
        stats[2] += took
        if took > stats[3]:
            stats[3] = took
        recorder = self.recorder
        recorder.current = None
        recorder.last_done = record
        self.finished = record.seq
        if self._turn_waiters:
            self._wake()

    def ticket(self, op: str, fp: Fingerprint | None) -> tuple[Begin, End]:
        """``begin`` and ``end`` made for calls that are all ``op`` with ``fp`` (a short
        path's plan keeps them): they do what ``begin(op, fp)`` and ``end(record)`` do, with
        the operation's totals and the bytes a call moves looked up once, here, and no method
        call (two frames and a dict lookup less per call: about 90 ns)."""
        seqs, ring, capacity, recorder = self._seqs, self._ring, self._capacity, self.recorder
        stats = recorder.totals(op)  # (the recorder never replaces an operation's totals)
        nbytes = 0 if fp is None else fp[3] * ITEMSIZE.get(fp[2], 0)

        def begin() -> CallRecord:
            seq = self.last_seq = next(seqs)
            record = CallRecord(seq, op, fp, _clock())
            ring[seq % capacity] = recorder.current = record
            return record

        def end(record: CallRecord) -> None:
            now = record.ended = _clock()
            took = now - record.started
            stats[0] += 1
            stats[1] += nbytes
            stats[2] += took
            if took > stats[3]:
                stats[3] = took
            recorder.current = None
            recorder.last_done = record
            self.finished = record.seq
            if self._turn_waiters:
                self._wake()

        return begin, end

    def fail(self, record: CallRecord, exc: BaseException, breaks: bool = True) -> None:
        """The call of ``record`` raised ``exc``: record it, break the group (unless not
        ``breaks``: an error that leaves the group usable, e.g. a refused argument), hand
        the turn on."""
        try:
            record.error = f"{type(exc).__name__}: {exc}"[:500]
            took = (record.ended or _clock()) - record.started
            record.ended = record.started + took
            stats = self.recorder.totals(record.op)
            stats[0] += 1
            fp = record.fp
            if fp is not None:  # (as a completed call's: the call was made with them)
                stats[1] += fp[3] * ITEMSIZE.get(fp[2], 0)
            stats[2] += took
            stats[3] = max(stats[3], took)
            stats[4] += 1
            recorder = self.recorder
            recorder.current = None
            recorder.last_failed = record
            if breaks:
                self.break_group(self.context(record.op, record.seq), exc)
        finally:
            self.finished = record.seq
            if self._turn_waiters:
                self._wake()

    def in_flight(self) -> bool:
        """Whether a call of this group was made and has not ended: one running or waiting
        for its turn (numbered), or an async one still in the queue (numbered when it runs)."""
        queue = self.queue
        return self.last_seq != self.finished or (queue is not None and bool(queue.items or queue.runner))

    def deadline(self, record: CallRecord) -> Deadline:
        """The deadline of the call of ``record``, counted from its start."""
        return Deadline(record.started + self.timeout, self.timeout)

    # -- turns -------------------------------------------------------------------------------
    def await_turn(self, seq: int, deadline: Deadline, context: object) -> None:
        """Wait for the calls before #seq (queued async calls) to end."""
        if self.finished >= seq - 1:
            return
        with self._turn:
            self._turn_waiters += 1
            try:
                while self.finished < seq - 1:
                    remaining = deadline.remaining()
                    if remaining <= 0:
                        raise DistTimeoutError(
                            f"{context}: the calls before it on this group did "
                            f"not finish in time (the last one ended is #{self.finished})"
                        )
                    self._turn.wait(min(remaining, 0.5))
            finally:
                self._turn_waiters -= 1

    def _wake(self) -> None:
        with self._turn:
            self._turn.notify_all()

    # -- failure -----------------------------------------------------------------------------
    def break_group(self, context: str, exc: BaseException) -> None:
        """The group cannot be used any more because the call of ``context`` raised ``exc``.
        The first failure is explained (``explain``) before anything is told to the peers,
        and is what ``broken`` says; the engine's ``on_break`` runs every time (it knows
        whether its peers were told already)."""
        if self.broken is None:
            explain = self.explain
            if explain is not None:
                try:  # a timeout's stuck report reads the peers' posts: before they are told
                    explain(context, exc)
                except Exception:  # noqa: BLE001 — diagnostics must never hide the real error
                    pass
            self.broken = f"{context.split(' on ')[0]} failed ({type(exc).__name__}: {exc})"
        if self.on_break is not None:
            self.on_break(context, exc)

    def close(self) -> None:
        """The group shut down: drop the hooks (bound methods of the group: a cycle)."""
        self.explain = None
        self.on_break = None
