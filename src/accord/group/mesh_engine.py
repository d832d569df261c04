"""accord's own engine: a group's calls over a mesh (shared memory on a host, TCP between).

Owns: ``MeshEngine`` — the group's channel on the mesh, its shared-memory domain and call
slots (members on one host), its hierarchy and inner groups (members on several hosts, the
same number on each), the algorithm choice, and the three ways a call runs: in the caller's
thread (``run_collective`` with ``async_op=False``), queued as the blocking call it would be
and run by whoever needs it first (``defer``, ``group.executor``), or from a cached plan
(``run_planned``: the short paths). What breaking the group means here: the channel fails,
the peers are told, the inner groups break. ``mesh_group`` makes a ProcessGroup on it.
Implements ``group.engine.Planner``. Must not know about environment variables, rendezvous,
the API or MPI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from .. import profiling
from ..arrays import Buffer
from ..collectives import registry
from ..collectives.registry import Algorithm
from ..errors import DestroyedGroupError, PeerError, clear_frames_below
from ..timeouts import Deadline
from ..transport.mesh import Channel, Mesh
from ..transport.shm import ShmDomain, oversubscribed
from ..transport.wire import Fingerprint
from . import one_round, shared_memory
from .call import CallPeers, describe_call
from .executor import DEFAULT_PICKUP_DELAY, OVERSUBSCRIBED_PICKUP_DELAY, AsyncExecutor
from .hierarchy import ALGORITHMS as HIERARCHICAL_ALGORITHMS
from .hierarchy import HIERARCHICAL, Hierarchy
from .process_group import ProcessGroup
from .recorder import CallRecord
from .shared_memory import CallSlots
from .work import Work

_modules_get = sys.modules.get  # the profiler check: is torch's profiler module even loaded?
_TORCH_PROFILER = profiling.TORCH_PROFILER


def mesh_group(
    mesh: Mesh,
    group_id: int,
    ranks: Sequence[int],
    timeout: timedelta | float,
    backend: str,
    name: str,
    desc: str | None = None,
) -> ProcessGroup:
    """A process group of ``ranks`` (mesh ranks, this one among them) on accord's engine."""
    return ProcessGroup(
        lambda group: MeshEngine(group, mesh),
        ranks,
        list(ranks).index(mesh.rank),
        group_id,
        timeout,
        backend,
        name,
        desc,
    )


class MeshEngine:
    """accord's engine for one group (see the module docstring)."""

    plannable = True
    p2p = None  # the mesh carries sends and receives (group.p2p)
    direct = None  # the short paths are accord's own (group.short_paths)

    def __init__(self, group: ProcessGroup, mesh: Mesh) -> None:
        self.group = group
        self.mesh = mesh
        self.calls = calls = group.calls
        tunables = group.tunables
        self.rank, self.members = group.rank(), group.members
        self.channel: Channel = mesh.open_channel(group.group_id, self.members, describe_call)
        calls.queue = AsyncExecutor(
            f"accord-{group.group_name}-async",
            OVERSUBSCRIBED_PICKUP_DELAY if oversubscribed(len(mesh.local_ranks())) else DEFAULT_PICKUP_DELAY,
        )
        calls.on_break = self._tell_peers
        self._queued_names: dict[str, str] = {}  # op → the name of its queued calls' Work
        self._event_open = False  # a queued call runs inside the profiler event its caller opened
        self._shm: ShmDomain | None = None
        self.call_slots: CallSlots | None = None  # the shared-memory slots (None: no shared memory)
        self._inner: list[ProcessGroup] = []  # the hierarchy's groups: they break with this one
        if shared_memory.eligible(mesh, self.members, tunables):
            self._shm = shared_memory.setup(
                mesh,
                self.channel,
                self.members,
                group.group_id,
                tunables,
                Deadline.after(calls.timeout),
                calls.context("shared-memory set-up"),
            )
        if self._shm is not None:
            self.call_slots = CallSlots(
                self._shm, tunables, describe_call, calls.scratch.array, calls.context
            )
        #: Members on several hosts, the same number on each: two-level algorithms (None: flat).
        self.hierarchy: Hierarchy | None = (
            None
            if self._shm is not None or not tunables.hierarchy
            else Hierarchy.of(
                mesh.host_ids, self.members, self.rank, self._inner_group, tunables.hierarchy_pipeline_bytes
            )
        )

    @property
    def tunables(self) -> Any:
        """The group's (config.Tunables; an inner group's are set after it is made)."""
        return self.group.tunables

    @property
    def shared(self) -> bool:
        """Whether this group's collectives may use shared memory (all members on one host)."""
        return self._shm is not None

    @property
    def cma(self) -> bool:
        """Whether members may read each other's memory directly (single-copy algorithms)."""
        return self._shm is not None and self._shm.cma is not None

    def context(self, op: str, seq: int | None = None) -> str:
        return self.calls.context(op, seq)

    def choose_algorithm(self, collective: str, nbytes: int) -> Algorithm:
        """The algorithm of a ``collective`` call moving ``nbytes`` on this group: the
        hierarchical one where the group spans hosts (unless ACCORD_ALGORITHM names another),
        else the registry's choice."""
        forced = self.tunables.algorithms.get(collective)
        if forced is None and self.hierarchy is not None:
            found = self.hierarchy.choose(collective, nbytes, self.tunables)
            if found is not None:
                return found
        elif forced == HIERARCHICAL:
            found = HIERARCHICAL_ALGORITHMS.get(collective) if self.hierarchy is not None else None
            if found is not None:
                return found
            raise ValueError(
                f"ACCORD_ALGORITHM asks for {collective}=hierarchical, which needs a group whose "
                f"members are on several hosts, the same number (two or more) on each, and "
                f"exists for {', '.join(HIERARCHICAL_ALGORITHMS)}"
            )
        return registry.choose(
            collective, nbytes, len(self.members), self.tunables, self._shm is not None, self.cma
        )

    def _inner_group(self, key: str, ranks: Sequence[int]) -> ProcessGroup:
        """A hidden group of some members (the hierarchy's), the same id on each of them;
        shut down with this group."""
        group = self.group
        digest = hashlib.blake2b(f"{group.group_id}/{key}".encode(), digest_size=4).digest()
        inner = mesh_group(
            self.mesh,
            int.from_bytes(digest, "little") or 1,
            ranks,
            self.calls.timeout,
            group.backend,
            f"{group.group_name}/{key}",
        )
        # an ACCORD_ALGORITHM=…=hierarchical is for the outer group: the inner ones are flat
        inner.tunables = dataclasses.replace(
            self.tunables,
            algorithms={
                name: algo for name, algo in self.tunables.algorithms.items() if algo != HIERARCHICAL
            },
        )
        group.companions.append(inner)
        self._inner.append(inner)
        return inner

    def twin(self, group_id: int, name: str) -> ProcessGroup:
        """A new group of the same ranks (every member makes it, in the same order), for
        checks that must not disturb this group's calls (DETAIL's argument check)."""
        return mesh_group(self.mesh, group_id, self.members, self.calls.timeout, self.group.backend, name)

    def subgroup(
        self, group_id: int, ranks: Sequence[int], timeout: float, backend: str, name: str, desc: str | None
    ) -> ProcessGroup:
        """A group of ``ranks`` on the same mesh (new_group: every member makes it)."""
        return mesh_group(self.mesh, group_id, ranks, timeout, backend, name, desc)

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
        """Run ``body`` as the next call of this group: now, or queued (``defer``).

        ``body`` gets the call's Peers, or its Slots when ``shared`` (a shared-memory
        algorithm). Calls run one at a time, in the order they were made; a call takes its
        number when it starts. The call's deadline starts when it is made: ``timeout``
        seconds, else the group's. ``inputs`` (the user's tensors) give the shapes of the
        call's event when torch's profiler records.
        """
        deadline = Deadline.after(self.calls.timeout if timeout is None else timeout)
        event = self._begin_event(op, inputs)

        def execute() -> list[Any]:
            try:
                return self._execute(op, self.calls.number(), fp, deadline, body, outputs, result, shared)
            finally:
                if event is not None:
                    profiling.end(event)

        if not async_op:
            queue = self.calls.queue
            if queue.pending():
                queue.drain(deadline.remaining(), self.context(op))
            execute()
            return None
        return self.defer(op, execute, result)

    def defer(self, op: str, run: Callable[[], Any], result: list[Any], inputs: Sequence[Any] = ()) -> Work:
        """Queue ``run`` (a call, run as a blocking one: it takes its number when it starts)
        and return its Work. Whoever needs it first runs it (executor): the caller that
        waits for it, a later blocking call, or the worker after its pickup delay.

        While torch's profiler records, the call's event opens now, in the caller's thread
        (torch records no thread it did not see start: not the worker), and closes when the
        call ends, wherever it ran, as gloo's async works do (``inputs``: its shapes)."""
        queue = self.calls.queue
        event = self._begin_event(op, inputs)
        if event is not None:
            run = self._in_event(run, event)
        future = queue.submit(run)
        name = self._queued_names.get(op)
        if name is None:
            name = self._queued_names[op] = f"{self.context(op)} (async)"
        return Work(name, result, future, on_future=queue.hurry)

    def _begin_event(self, op: str, inputs: Sequence[Any]) -> Any:
        """The profiler's event of a call (None: not recording, or a queued call's event is
        already open around this one)."""
        return None if self._event_open else profiling.begin_if_recording(op, inputs)

    def _in_event(self, run: Callable[[], Any], event: Any) -> Callable[[], Any]:
        """``run`` inside ``event`` (opened by the caller): the calls it makes open none."""

        def evented() -> Any:
            self._event_open = True
            try:
                return run()
            finally:
                self._event_open = False
                profiling.end(event)

        return evented

    def _execute(
        self,
        op: str,
        seq: int,
        fp: Fingerprint,
        deadline: Deadline,
        body: Callable[[Any], None],
        outputs: Sequence[Buffer],
        result: list[Any],
        shared: bool,
    ) -> list[Any]:
        """Run call #seq now, in this thread, after the calls before it (run_collective)."""
        calls = self.calls
        peers = CallPeers(self.group, self.channel, op, seq, fp, deadline)
        if self.mesh.channel_closed(self.channel):
            raise self._destroyed(op)
        if calls.broken is not None or self.channel.error is not None:
            self._raise_broken(str(peers))
        calls.await_turn(seq, deadline, peers)
        channel = self.channel
        record = calls.start(seq, op, fp)
        try:
            channel.begin(seq, fp, peers)
            body(self._slots(peers, seq, fp, deadline) if shared else peers)
        except BaseException as exc:
            try:
                calls.fail(record, exc)
            finally:
                channel.end(seq)
            clear_frames_below(exc)
            raise
        channel.end(seq)
        calls.end(record)
        for out in outputs:
            out.finish()
        return result

    def _slots(self, peers: CallPeers, seq: int, fp: Fingerprint, deadline: Deadline) -> CallSlots:
        slots = self.call_slots
        if slots is None:
            raise self._destroyed(peers.op)
        return slots.reset(peers.op, seq, fp, deadline.expires_at, deadline.budget)

    def run_planned(
        self, op: str, fp: Fingerprint, algorithm: Algorithm, args: Sequence[Any], inputs: Sequence[Any] = ()
    ) -> None:
        """The short path of a blocking call whose plan (algorithm, fingerprint, kernel) the
        caller already has. A shared-memory algorithm runs with no Work, no Peers, the
        deadline made only if needed; a message algorithm (TCP) as ``run_collective`` runs it,
        less the Work and the closures. ``inputs``: as for run_collective."""
        calls = self.calls
        if algorithm.kind == registry.MESSAGES:
            self._run_planned_messages(op, fp, algorithm, args, inputs)
            return
        if calls.queue.pending():
            calls.queue.drain(calls.timeout, self.context(op))
        seq = calls.number()
        if calls.broken is not None or self.channel.error is not None:
            self._raise_broken(self.context(op, seq))
        if calls.finished < seq - 1:
            calls.await_turn(seq, Deadline.after(calls.timeout), self.context(op, seq))
        slots = self.call_slots
        if slots is None:
            raise self._destroyed(op)
        slots.reset(op, seq, fp, time.monotonic() + calls.timeout, calls.timeout)
        record = calls.start(seq, op, fp)
        prof = _modules_get(_TORCH_PROFILER)  # None unless torch is imported: one dict lookup
        if prof is not None:  # torch is imported: is its profiler recording? (profiling.recording)
            try:
                recording = prof._is_profiler_enabled
            except AttributeError:  # torch is being imported by another thread
                recording = False
            if recording and not self._event_open:
                self._run_profiled(op, algorithm, slots, args, inputs, record)
                return
        try:
            algorithm.run(slots, *args)
        except BaseException as exc:
            calls.fail(record, exc)
            clear_frames_below(exc)
            raise
        calls.end(record)

    def _run_planned_messages(
        self, op: str, fp: Fingerprint, algorithm: Algorithm, args: Sequence[Any], inputs: Sequence[Any]
    ) -> None:
        deadline = Deadline.after(self.calls.timeout)
        queue = self.calls.queue
        if queue.pending():
            queue.drain(self.calls.timeout, self.context(op))
        seq = self.calls.number()
        event = self._begin_event(op, inputs)
        try:
            self._execute(op, seq, fp, deadline, lambda peers: algorithm.run(peers, *args), (), [], False)
        finally:
            if event is not None:
                profiling.end(event)

    def _run_profiled(
        self,
        op: str,
        algorithm: Algorithm,
        slots: CallSlots,
        args: Sequence[Any],
        inputs: Sequence[Any],
        record: CallRecord,
    ) -> None:
        """run_planned's end while torch's profiler records: the call inside its event."""
        event = profiling.begin(op, inputs)
        try:
            algorithm.run(slots, *args)
        except BaseException as exc:
            profiling.end(event)
            self.calls.fail(record, exc)
            clear_frames_below(exc)
            raise
        profiling.end(event)
        self.calls.end(record)

    def _destroyed(self, op: str) -> DestroyedGroupError:
        return DestroyedGroupError(
            f"{self.context(op, self.calls.last_seq)}: this process group was destroyed on this rank "
            f"(destroy_process_group); create a new one with new_group"
        )

    def _raise_broken(self, context: str) -> None:
        calls = self.calls
        if calls.broken is None:
            calls.broken = str(self.channel.error)
        error = PeerError(
            f"{context}: this group cannot be used since {calls.broken}. "
            f"Destroy it (destroy_process_group) and create a new one"
        )
        self._break_inner(context, error)  # members may already wait in them for this call
        raise error

    def _tell_peers(self, context: str, exc: BaseException) -> None:
        """What breaking means on accord's engine (``calls.on_break``): the channel fails, the
        peers are told (once), the hierarchy's groups break too."""
        self.channel.fail(exc, notify_peers=self.channel.error is None)
        self._break_inner(context, exc)

    def _break_inner(self, context: str, exc: BaseException) -> None:
        """Break the hierarchy's groups too: their members may wait there, not here."""
        for inner in self._inner:
            if not inner.is_broken():
                inner.calls.break_group(context, exc)

    # -- lifetime ---------------------------------------------------------------------------
    def is_broken(self) -> bool:
        return self.calls.broken is not None or self.channel.error is not None

    def abort(self, reason: str | None = None) -> None:
        """Break this group now: pending and later calls raise, here and on the peers, who
        are told ``reason`` (torch's ProcessGroup.abort)."""
        text = reason or f"group {self.group.group_name!r} was aborted on rank {self.mesh.rank}"
        self.channel.fail(PeerError(text), notify_peers=True)
        if self.calls.broken is None:
            self.calls.broken = reason or "it was aborted"

    def shutdown(self) -> None:
        """Stop the async worker, unmap shared memory, detach from the mesh (which stays open)."""
        self.calls.queue.shutdown()
        self.mesh.close_channel(self.channel, self.calls.finished)
        # The call slots hold views of the segments and bound methods of this group (a cycle
        # only the garbage collector would break): drop them first, so the mappings and
        # their descriptors go now, not whenever the collector runs.
        if self.call_slots is not None:
            self.call_slots.close()
        self.call_slots = None
        plans = self.group.plans
        one_round.release(plans.values())  # their closures hold views of the segments
        plans.clear()
        error = self.channel.error
        if error is not None and error.__traceback__ is not None:
            # The failure that broke the group keeps the failed call's frames, whose locals
            # hold this group and views of its segments: a cycle only the collector would
            # break. Clearing the frames' locals keeps the traceback and frees them now.
            traceback.clear_frames(error.__traceback__)
        if self._shm is not None:
            self._shm.close()
            self._shm = None
