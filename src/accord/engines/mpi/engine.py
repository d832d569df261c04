"""``MpiEngine``: the engine of a ProcessGroup whose calls run on an MPI communicator.

Owns: ``mpi_group`` (a ProcessGroup on a communicator) and, per group, its engine: the
two communicators (``comm`` for MPI's collectives and the user's sends
and receives, ``msg_comm`` for accord's message-based calls), the check that every rank
called the same collective before MPI is asked to run it (``agreement``; each collective
runs it in its MPI function, where small data rides on it; a
mismatch is a CollectiveMismatchError naming each rank's call, on every rank, and the
group stays usable), running a call now or as a Work on MPI's nonblocking requests (how an
async call is started later, in order, and waited for is ``async_calls``': ``AsyncCalls``, a
mixin of ``MpiEngine``, split from here so each module stays under 400 lines), the flight
recorder's entries, subgroups (``Create_group``) and shutting down. Everything above
``run_collective`` — argument checks, buffers, fingerprints, object collectives — is
accord's, shared with its own transport. Must not know about the API or env variables
beyond ``config``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

from ... import config, profiling
from ...arrays import Buffer
from ...collectives.algorithm import COLLECTIVE_NAMES, COLLECTIVES, Algorithm
from ...errors import CollectiveMismatchError, DestroyedGroupError, DistTimeoutError, PeerError
from ...group.call import OBJECT_CALLS, describe_call
from ...group.process_group import ProcessGroup
from ...group.recorder import CallRecord
from ...group.work import Work
from ...timeouts import Deadline
from ...transport.wire import Fingerprint
from . import runtime
from .agreement import Agreement, fingerprint_hash
from .algorithms import ALGORITHMS, MPI_ALGORITHM_CODE
from .async_calls import AsyncCalls, Started
from .call import MpiCall
from .direct import DirectPath

#: The object collectives are checked too: accord's messages on MPI carry no fingerprint, so a
#: rank in another object call would take their frames as its own. All but gather_object,
#: whose non-roots send and finish without waiting for the root (as torch's do, even when the
#: root refused its call): a check would make them wait. With every other object call
#: checked, no two different unchecked calls can meet.
_OBJECT = COLLECTIVES["object"]
_GATHER = {name: code for code, name in OBJECT_CALLS.items()}["gather_object"]


_live_worlds = 0  # default groups of an MPI world not yet shut down (the abort hook's check)


def world_alive() -> bool:
    """Whether an MPI world's default group is live in this process (not destroyed)."""
    return _live_worlds > 0


def mpi_group(
    comm: Any,
    ranks: Sequence[int],
    group_id: int,
    timeout: timedelta | float,
    name: str,
    desc: str | None = None,
    kind: type[ProcessGroup] = ProcessGroup,
) -> ProcessGroup:
    """A process group of ``ranks`` (global ranks) on MPI communicator ``comm`` (backend "mpi");
    ``kind``: its class (the API hands out a subclass with torch's method-level API)."""
    return kind(
        lambda group: MpiEngine(group, comm), ranks, comm.Get_rank(), group_id, timeout, "mpi", name, desc
    )


class MpiEngine(AsyncCalls):
    """The engine of one group on an MPI communicator (see the module docstring)."""

    plannable = False  # its short paths are its own (``direct``)
    shared = False
    cma = False
    hierarchy = None

    def __init__(self, group: ProcessGroup, comm: Any) -> None:
        from .p2p import MpiP2P

        self.group = group
        self.calls = group.calls
        self.comm = comm
        self.msg_comm = comm.Dup()
        #: async calls whose MPI part has not started yet (their check waits for the other
        #: ranks): started in order by whoever needs them first (``_start_until``)
        self.unstarted: deque[Started] = deque()
        self._start_lock = threading.Lock()  # held while queued calls are started
        self._starter: threading.Thread | None = None
        self._starter_lock = threading.Lock()  # (the starter may be deciding to stop)
        #: settle functions of the async calls whose Future was asked for (``get_future``),
        #: driven to their end by the completer thread (``AsyncCalls._complete``)
        self._watched: deque[Callable[[bool], None]] = deque()
        self._watch_ready = threading.Condition()
        self._completer: threading.Thread | None = None
        self.checks = config.mpi_checks()
        self._abandoned: list[Any] = []  # requests of failed calls, and their buffers
        self.destroyed = False  # shut down on this rank (destroy_process_group)
        self.agreement = Agreement(comm, comm.Get_size())
        self.p2p = MpiP2P(self)
        self.direct = DirectPath(self)
        if group.group_id == 0:
            global _live_worlds
            _live_worlds += 1

    def context(self, op: str, seq: int | None = None) -> str:
        return self.calls.context(op, seq)

    def choose_algorithm(self, collective: str, nbytes: int) -> Algorithm:
        return ALGORITHMS[collective]

    def twin(self, group_id: int, name: str) -> ProcessGroup:
        self._settle_queued("new_group")
        return mpi_group(
            self.comm.Dup(), self.group.members, group_id, self.calls.timeout, name, None, type(self.group)
        )

    def _settle_queued(self, op: str) -> None:
        """Before a collective MPI call outside the collectives (a new communicator)."""
        if self.unstarted:
            self._start_until(None, Deadline.after(self.calls.timeout), self.context(op))

    def subgroup(
        self, group_id: int, ranks: Sequence[int], timeout: float, backend: str, name: str, desc: str | None
    ) -> ProcessGroup:
        """A group of ``ranks`` (global ranks, this one among them), made by the members
        only (MPI_Comm_create_group), as new_group's every member calls it in the same order."""
        mpi = runtime.load()
        self._settle_queued("new_group")
        world = self.comm.Get_group()
        members = world.Incl([self.group.group_rank_of(r) for r in ranks])
        try:
            comm = self.comm.Create_group(members, group_id % (1 << 15))
        finally:
            members.Free()
            world.Free()
        if comm == mpi.COMM_NULL:
            raise PeerError(
                f"new_group on rank {self.group.global_rank}: MPI made no communicator for "
                f"ranks {list(ranks)}"
            )
        return mpi_group(comm, ranks, group_id, timeout, name, desc, type(self.group))

    # -- running a collective ----------------------------------------------------------------
    def run_collective(
        self,
        op: str,
        fp: Fingerprint,
        body: Callable[[Any], None],
        outputs: Sequence[Buffer],
        result: list[Any],
        async_op: bool,
        timeout: float | None = None,
        shared: bool = False,
        inputs: Sequence[Any] = (),
    ) -> Work | None:
        """Call #seq: check that every rank called the same, start MPI's part (``body``
        gets an MpiCall), then wait for it now or return the Work that waits for it."""
        calls = self.calls
        seq = calls.number()
        deadline = Deadline.after(calls.timeout if timeout is None else timeout)
        context = self.context(op, seq)
        if self.destroyed:
            raise self._destroyed(op)
        if calls.broken is not None:
            self._raise_broken(context)
        if not async_op and self.unstarted:  # earlier async calls have not started: after them
            self._start_until(None, deadline, context)
        event = profiling.begin_if_recording(op, inputs)
        entry = calls.start(seq, op, fp)
        call = MpiCall(self, op, seq, deadline, deferred=async_op, fp=fp)

        def start() -> None:
            """The check (which waits for every rank), then MPI's part started."""
            try:
                if calls.broken is not None:  # (an async call: an earlier one broke the group)
                    self._raise_broken(context)
                if self.checks:
                    if fp.algo == MPI_ALGORITHM_CODE:  # MPI's collectives check in their function
                        call.agree = lambda: self._agree(call, fp, seq)
                    elif fp.op == _OBJECT and fp.algo != _GATHER:
                        self._agree(call, fp, seq)
                body(call)
            except BaseException as exc:
                self._fail(entry, context, exc, event)
                raise

        if not async_op:
            start()
            self._succeed(entry, outputs, event)
            return None
        # An async call returns at once: its check waits for the other ranks in whoever needs
        # it started first (its Work's wait, the group's next call) or on the group's starter
        # thread, never in the caller, so that the caller may go on to calls the other ranks
        # need first (a send they receive before they reach this call). Calls start in order.
        started = Started(start)
        with self._starter_lock:  # (the starter may be deciding to stop: see _start_late)
            self.unstarted.append(started)
            if self._starter is None:
                self._starter = threading.Thread(
                    target=self._start_late, daemon=True, name=f"accord-mpi-{self.group.group_name}-start"
                )
                self._starter.start()
        return self._work(call, started, entry, context, outputs, result, event)

    def _succeed(self, entry: CallRecord, outputs: Sequence[Buffer], event: Any) -> None:
        self.calls.end(entry)
        for out in outputs:
            out.finish()
        if event is not None:
            profiling.end(event)

    def _fail(self, entry: CallRecord, context: str, exc: BaseException, event: Any) -> None:
        if event is not None:
            profiling.end(event)
        self.calls.fail(
            entry, exc, breaks=not isinstance(exc, (CollectiveMismatchError, ValueError, TypeError))
        )

    def _agree(self, call: MpiCall, fp: Fingerprint, seq: int) -> None:
        """Every rank called the same collective (``agreement``'s one MPI call, carrying what
        the caller put in its record): else raise, on every rank, a CollectiveMismatchError
        that shows each rank's call."""
        agreement = self.agreement
        h = fingerprint_hash(fp)
        request = agreement.start(h)
        if not runtime.wait_until(request.Test, call.deadline):
            self.abandon([request], agreement)
            raise runtime.timed_out(
                str(call),
                call.deadline,
                "the ranks' arrival at this call (accord's check before MPI's collective)",
            )
        if not agreement.agreed(h):
            self.explain_mismatch(seq, fp, call.deadline)

    def explain_mismatch(self, seq: int, fp: Fingerprint, deadline: Deadline) -> None:
        """The ranks' calls differ (every rank knows it): exchange them and raise the
        CollectiveMismatchError that shows each rank's call, on every rank."""
        group = self.group
        everyone = np.zeros((group.size(), len(fp)), dtype=np.int64)
        request = self.comm.Iallgather(np.array(fp, dtype=np.int64), everyone)
        context = self.context(COLLECTIVE_NAMES.get(fp.op, "collective"), seq)
        if not runtime.wait_until(request.Test, deadline):
            self.abandon([request], everyone)
            raise runtime.timed_out(context, deadline, "the exchange of the ranks' calls")
        calls = "; ".join(
            f"rank {group.global_rank_of(r)}: {describe_call(Fingerprint(*map(int, everyone[r])), seq)}"
            for r in range(group.size())
        )
        raise CollectiveMismatchError(
            f"{context}: the ranks did not call the same collective ({calls}). "
            f"Nothing was sent; every rank must call the same collectives "
            f"in the same order"
        )

    def abandon(self, requests: Sequence[Any], keep: Any) -> None:
        """Requests a failed call leaves pending, and the buffers they use: kept alive."""
        self._abandoned.append((list(requests), keep))

    # -- failure and lifetime ---------------------------------------------------------------
    def _destroyed(self, op: str) -> DestroyedGroupError:
        return DestroyedGroupError(
            f"{self.context(op, self.calls.last_seq)}: this process group was destroyed on this rank "
            f"(destroy_process_group); create a new one with new_group"
        )

    def _raise_broken(self, context: str) -> None:
        raise PeerError(
            f"{context}: this group cannot be used since {self.calls.broken}. "
            f"Destroy it (destroy_process_group) and create a new one"
        )

    def is_broken(self) -> bool:
        return self.calls.broken is not None

    def abort(self, reason: str | None = None) -> None:
        """Break this group: later calls raise at once. (MPI cannot interrupt a call in
        flight; the MPI world's exception hook ends the job instead of leaving peers hanging.)"""
        if self.calls.broken is None:
            self.calls.broken = reason or "it was aborted"

    def shutdown(self) -> None:
        if self.destroyed:
            return
        if self.unstarted:  # queued async calls start (or fail) first
            try:
                self._start_until(
                    None, Deadline.after(min(self.calls.timeout, 5.0)), self.context("shutdown")
                )
            except DistTimeoutError:
                pass
        self.destroyed = True
        with self._watch_ready:  # the completer ends (a call it drives ends by its deadline)
            self._watch_ready.notify()
        if self.group.group_id == 0:
            global _live_worlds
            _live_worlds -= 1
        self.group.plans.clear()
        if self.unstarted:
            return  # an async call still waits in its check: keep what MPI may use
        if self._abandoned:
            return  # MPI may still write into those buffers: keep the communicators as they are
        if self.calls.broken is not None or self.group.calls_raised:
            # A call failed, or was refused here while the other ranks went on: their messages
            # may still arrive. A freed communicator's context is reused by the next one MPI
            # makes, and Open MPI hands it such a message (aborting, or as the new call's data).
            return
        self.agreement.close()
        for comm in (self.msg_comm, self.comm):
            try:
                comm.Free()
            except Exception:  # noqa: BLE001 — MPI already finalized (interpreter exit)
                pass
