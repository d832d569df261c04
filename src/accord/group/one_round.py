"""Compiled one-round calls: the fastest form of a planned shared-memory collective.

Owns: ``compile_call`` — for a planned blocking call whose data fits one slot round on a
shared-memory group, a closure that runs the whole call: the bookkeeping of
``MeshEngine.run_planned`` (call number, turn, broken group, flight recorder, failure: the
group's ``CallSequencer``, bound once) and
the round protocol of ``CallSlots`` (begin, fingerprint words, ready, wait, done), with every
object it touches looked up once, when the plan is made, instead of on every call; and
``release``, which drops what compiled calls hold when their group shuts down; and ``Round``,
the ``collectives.slots.Round`` a body is made over. The bodies of the one-round schedules
are in ``collectives`` (``shm``, ``shm_rooted``, ``shm_exchange``), each beside its schedule.

Why: a small collective's time is Python's, not memory's. With more ranks than cores it is
paid once per rank on each core per call, and cold (each switch of rank evicts the other's
working set): at world 4 on 2 cores an 8-byte all_reduce took 45–75 µs through
``run_planned``, the bare round about 25 µs.

The words written, their order and the results are exactly those of ``run_planned`` running
the one-slot case of ``collectives.shm``, ``shm_rooted`` and ``shm_exchange`` (reductions in
rank order, bit-identical on every rank; the same slot layouts): a rank on this path meets a
rank on the long path in the same round. The caller compiles only where those schedules take
their one-slot case. Anything unusual — an async call still running, a broken or destroyed
group, torch's profiler recording (unless the call is a queued one, which runs inside its
own event) — makes the closure return False before the call starts,
and the caller takes ``run_planned``. One order differs from the long path's, in time only:
a root's body that only posts (broadcast's, scatter's) posts before its call's record is
made, when its slot is free at once (``post_first``); a root that must wait for its slot
makes the record first, as every waiting call does, so that diagnostics see it. A slow
wait (a peer not there at the first look), a fingerprint that disagrees and a failure go
through the same ``ShmDomain.wait_slow``, ``CallSlots`` errors and ``calls.fail`` (the
group's ``CallSequencer``) as on the long path.
Must not know about the API or torch, nor what a schedule writes in its round (its body, in
``collectives``, does).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import profiling
from ..collectives import shm, shm_exchange, shm_rooted
from ..collectives.slots import ROOT, Body
from ..errors import clear_frames_below
from ..timeouts import Deadline
from ..transport.shm_words import DETAIL_OFFSET, DONE, FP, READY, REDUCED, SEQ
from ..transport.wire import Fingerprint
from .left_rounds import settle as settle_left
from .shared_memory import HASH_MASK, SEQ_MIX, TAIL, CallSlots

_modules_get = sys.modules.get
_get_ident = threading.get_ident
#: where compiled closures are made: here, and the bodies beside their schedules
_OURS = (__name__, shm.__name__, shm_rooted.__name__, shm_exchange.__name__)
_TORCH_PROFILER = profiling.TORCH_PROFILER


class Round:
    """``collectives.slots.Round`` over a ``ShmDomain``: what a body needs from its compiled
    call, looked up once (a body keeps what it uses in locals): this rank's control words and
    where each word is, the wait, and views of every rank's slot."""

    __slots__ = ("mine", "words", "wait", "bound", "leave", "reduced_wait", "_domain")
    READY, DONE, REDUCED, FP = READY, DONE, REDUCED, FP  # the words' indices (transport.shm_words)

    def __init__(
        self,
        mine: Any,
        wait: Callable[[Sequence[int], int, int, int], None],
        bound: Callable[[int], CallSlots],
        leave: Callable[[int, int, int], None],
        reduced_wait: Callable[[int, int], None],
        domain: Any,
    ) -> None:
        self.mine = mine  # this rank's words: mine[READY] = k, mine[DONE] = k
        self.words = domain.words  # every rank's words (a first look before ``wait``)
        #: wait(ranks, k, h, seq): until ``ranks`` are ready for round k, their fingerprints
        #: checked (CollectiveMismatchError naming both calls)
        self.wait = wait
        self.bound = bound  # bound(seq): the call's CallSlots, for an error message
        # The two below are closures, not methods: a body that keeps one must not keep this
        # object and its views once ``release`` emptied the closures.
        #: leave(k, h, seq): ``CallSlots.leave`` for round k of call ``seq``
        self.leave = leave
        #: reduced_wait(k, seq): until rank 0 has said ``reduced`` for round k (the slow way)
        self.reduced_wait = reduced_wait
        self._domain = domain

    def views(self, nbytes: int, dtype: np.dtype) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every rank's slot, its first ``nbytes`` as ``dtype``: for parity 0 and parity 1."""
        return self._domain.views(0, nbytes, dtype), self._domain.views(1, nbytes, dtype)


def compile_call(
    group: Any, op: str, fp: Fingerprint, nbytes: int, make_body: Callable[[Round], Body]
) -> Callable[..., bool] | None:
    """The compiled form of one planned call signature of ``group`` (None: not possible).

    ``nbytes``: the most the round puts in one rank's slot (it must fit);
    ``make_body(round)`` builds the round's body.
    """
    slots: CallSlots | None = group.engine.call_slots
    if slots is None or not 0 < nbytes <= slots.slot_bytes:
        return None
    domain = slots.domain
    words, mine, others = domain.words, domain.mine, tuple(slots.others)
    base, tail = hash(fp), TAIL.pack(*fp, 0, 0)
    posted = slots.posted_tails
    detail = [slice(at + 8, at + 64) for at in DETAIL_OFFSET]
    engine = group.engine
    calls, channel = group.calls, engine.channel
    begin, end = calls.ticket(op, fp)  # (this call's own: totals and bytes looked up once)
    fail = calls.fail
    number, start = calls.number, calls.start  # (post_first: the number, the record after)
    queue = calls.queue
    queued = queue.items

    def bound(seq: int) -> CallSlots:
        """The CallSlots of this call, as run_planned binds it (the deadline from its start)."""
        record = calls.recorder.current
        deadline = calls.deadline(record) if record is not None else Deadline.after(calls.timeout)
        return slots.reset(op, seq, fp, deadline.expires_at, deadline.budget)

    def wait(ranks: Sequence[int], k: int, h: int, seq: int) -> None:
        for r in ranks:
            if words[r][READY] < k:
                if not domain.quick_wait(READY, k, ranks):
                    call = bound(seq)
                    domain.wait_slow(READY, k, ranks, call.deadline, call)
                break
        at = FP + (k & 1)
        for r in ranks:
            if words[r][at] != h:
                raise bound(seq).mismatch(r, domain.fingerprint(r, k))

    def leave(k: int, h: int, seq: int) -> None:
        slots.left = (k, h, fp, seq)

    def reduced_wait(k: int, seq: int) -> None:
        if not domain.quick_wait(REDUCED, k, ROOT):
            call = bound(seq)
            domain.wait_slow(REDUCED, k, ROOT, call.deadline, call)

    body = make_body(Round(mine, wait, bound, leave, reduced_wait, domain))
    #: the body only writes and never waits (a root's send: broadcast's, scatter's): when
    #: its slot is free at once, it posts before the call's record is made (``post_first``)
    posts_only = getattr(body, "posts_only", False)

    def post_first(k: int, args: tuple[Any, ...]) -> bool:
        """``run`` for a body that only posts, its slot free (no round left to settle, the
        others done with round k - 2): the call takes its number first (another thread's
        call now waits its turn), then the data and READY go out, and the call's record is
        made after (about 0.3 µs sooner for the ranks that wait for them). Nothing here
        waits, so no wait goes unrecorded: the record is made at once after, and on a
        failure."""
        seq = number()
        h = base ^ (seq * SEQ_MIX & HASH_MASK)
        domain.round = k
        parity = k & 1
        try:
            if posted[parity] is not tail:
                domain.mine_bytes[detail[parity]] = tail
                posted[parity] = tail
            mine[SEQ + parity] = seq
            mine[FP + parity] = h
            body(k, h, seq, parity, *args)
        except BaseException as exc:
            fail(start(seq, op, fp), exc)
            clear_frames_below(exc)
            raise
        end(start(seq, op, fp))
        return True

    def run(*args: Any) -> bool:
        if (
            calls.finished != calls.last_seq
            or calls.broken is not None
            or channel.error is not None
            or slots.closed
        ):
            return False  # run_planned waits for its turn, or explains what is wrong
        runner = queue.runner  # (queue.pending(), written out: a queued call is its runner's)
        if runner:
            if runner != _get_ident():
                return False  # run_planned waits for the queued async calls first
        elif queued:
            return False  # run_planned runs the queued async calls first
        prof = _modules_get(_TORCH_PROFILER)
        if (
            prof is not None
            and getattr(prof, "_is_profiler_enabled", False)
            and engine.event_thread != _get_ident()
        ):
            return False  # run_planned puts the call in the profiler's event (a queued call
            # runs inside its own: ``engine.event_thread``)
        if posts_only and slots.left is None:
            k = domain.round + 1
            for r in others:
                if k > 2 and words[r][DONE] < k - 2:
                    break  # (its slot not free yet: the usual order, which may wait)
            else:
                return post_first(k, args)
        record = begin()
        seq = record.seq
        h = base ^ (seq * SEQ_MIX & HASH_MASK)
        try:
            if slots.left is not None:  # a round this rank left as a root: checked first
                settle_left(slots, lambda: bound(seq))
            k = domain.round + 1
            domain.round = k
            if k > 2:
                for r in others:
                    if words[r][DONE] < k - 2:
                        if not domain.quick_wait(DONE, k - 2, others):
                            call = bound(seq)
                            domain.wait_slow(DONE, k - 2, others, call.deadline, call)
                        break
            parity = k & 1
            if posted[parity] is not tail:  # the detail words, only when they change
                domain.mine_bytes[detail[parity]] = tail
                posted[parity] = tail
            mine[SEQ + parity] = seq
            mine[FP + parity] = h
            body(k, h, seq, parity, *args)
        except BaseException as exc:
            fail(record, exc)
            clear_frames_below(exc)
            raise
        end(record)
        return True

    return run


def release(plans: Any) -> None:
    """Drop the segment memory that the compiled calls among ``plans`` (a group's plan
    values) hold: views of the slots, the control words. Called when the group shuts down:
    a traceback that outlives the group (a caught CollectiveMismatchError) keeps its frames,
    a frame keeps its function, and its closure would otherwise keep the segments mapped.
    Only data goes: a call still blocked in a wait (destroy from another thread) ends as on
    the long path, with its group, recorder and error handling intact."""
    seen: set[int] = set()
    for plan in plans:
        if plan is not None and callable(plan[-1]):
            _drop_memory(plan[-1], seen)


def _drop_memory(function: Any, seen: set[int]) -> None:
    """Empty the cells holding segment memory in the closure of ``function`` and of the
    closures it holds, the ones made in this module only (never a shared one)."""
    if id(function) in seen or getattr(function, "__module__", None) not in _OURS:
        return
    seen.add(id(function))
    for cell in getattr(function, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(inner):
            _drop_memory(inner, seen)
        elif _memory(inner):
            cell.cell_contents = None


def _memory(value: Any) -> bool:
    if isinstance(value, (np.ndarray, memoryview)):
        return True
    return isinstance(value, (list, tuple)) and any(_memory(item) for item in value)
