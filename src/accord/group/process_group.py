"""ProcessGroup: binds a mesh channel and a sequence counter to the collective algorithms.

Owns: group membership and rank translation, the per-call sequence number and fingerprint,
running an algorithm in the caller's thread (or on the async worker), turning a failure into a
broken group that raises at once afterwards and tells its peers, and scratch memory. Must not
know about environment variables, rendezvous or the CLI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Sequence


from .. import config, profiling
from ..arrays import Buffer
from ..collectives import registry
from ..collectives.registry import COLLECTIVES, Algorithm
from ..errors import (ArgumentError, ArgumentTypeError, DestroyedGroupError, DistTimeoutError,
                      PeerError, clear_frames_below)
from ..timeouts import Deadline, to_seconds
from ..transport.mesh import Channel, Mesh
from ..transport.shm import ShmDomain, oversubscribed
from ..transport.wire import Fingerprint
from . import one_round, shared_memory
from .hierarchy import ALGORITHMS as HIERARCHICAL_ALGORITHMS
from .hierarchy import HIERARCHICAL, Hierarchy
from .call import CallPeers, describe_call
from .calls import CallSequencer
from .executor import DEFAULT_PICKUP_DELAY, OVERSUBSCRIBED_PICKUP_DELAY, AsyncExecutor
from .pickling import ObjectPolicy
from .recorder import CallRecord, FlightRecorder
from .shared_memory import CallSlots
from .work import Work

_modules_get = sys.modules.get  # the profiler check: is torch's profiler module even loaded?
_TORCH_PROFILER = profiling.TORCH_PROFILER



class ProcessGroup:
    """A set of ranks that run collectives together (torch.distributed.ProcessGroup).

    This class runs accord's algorithms over a mesh. Another engine (``backends.mpi``)
    subclasses it and overrides ``choose_algorithm``, ``run_collective``, ``twin`` and
    ``p2p_engine``: the checks, fingerprints, recorder and Work above stay the same.
    """

    #: Who carries this group's sends and receives when not the mesh (an object with
    #: ``send``/``recv``/``isend``/``irecv``/``send_frames``/``recv_frames``); None: the mesh.
    p2p_engine: Any = None
    #: Another engine's short path of blocking all_reduce / broadcast / barrier (methods that
    #: return False to take the long path); None: accord's shared-memory short paths.
    direct: Any = None
    #: {device kind: group} carrying this group's tensors of other devices (torch's NCCL for
    #: "cuda", made by the world); the API sends a call there when one ``claims`` its tensor.
    device_groups: dict[str, Any] = {}  # noqa: RUF012 — never mutated: replaced per instance
    #: The hierarchy of a group that spans hosts (group.hierarchy), and the inner groups it made.
    hierarchy: Hierarchy | None = None
    _inner: Sequence[ProcessGroup] = ()
    #: Calls on this group that this rank left by an exception (counted by the API): a refused
    #: argument, an object that does not pickle, a timeout… The other ranks may have gone on,
    #: and their messages to this rank may still arrive (backend mpi then keeps the group's
    #: communicators at destroy rather than let MPI hand those messages to a new one).
    calls_raised = 0
    #: True while a queued call runs inside the profiler event its caller opened (defer)
    _event_open = False

    def __init__(self, mesh: Mesh, group_id: int, ranks: Sequence[int], timeout: timedelta | float,
                 backend: str, name: str, desc: str | None = None) -> None:
        self._mesh = mesh
        self._ranks = list(ranks)
        self.members = self._ranks  # (the same list: read it, never change it)
        self._group_rank_of = {g: i for i, g in enumerate(self._ranks)}
        self._rank = self._group_rank_of[mesh.rank]
        self._channel: Channel = mesh.open_channel(group_id, self._ranks, describe_call)
        self.tunables = config.Tunables.from_env()
        self.backend = backend
        self.group_name = name
        self.group_desc = desc or name
        self.group_id = group_id
        queue = AsyncExecutor(f"accord-{name}-async", OVERSUBSCRIBED_PICKUP_DELAY
                              if oversubscribed(len(mesh.local_ranks())) else DEFAULT_PICKUP_DELAY)
        #: The group's call state: numbers, turns, broken state, timeout, recorder, scratch
        self.calls = CallSequencer(to_seconds(timeout), self._where(mesh.rank),
                                   FlightRecorder(self.tunables.flight_recorder_size), queue,
                                   on_break=self._tell_peers)
        self.recorder = self.calls.recorder
        self._queued_names: dict[str, str] = {}  # op → the name of its queued calls' Work
        self._object_policy: ObjectPolicy | None = None
        self._shm: ShmDomain | None = None
        self.call_slots: CallSlots | None = None  # the shared-memory slots (None: no shared memory)
        self.plans: dict[Any, Any] = {}  # per call signature: what the short path needs
        self._monitor: Any = None
        self.companions: list[ProcessGroup] = []  # hidden groups of the same ranks (DETAIL checks)
        self._inner: list[ProcessGroup] = []  # the hierarchy's groups: they break with this one
        if shared_memory.eligible(mesh, self._ranks, self.tunables):
            self._shm = shared_memory.setup(mesh, self._channel, self._ranks, group_id, self.tunables,
                                            Deadline.after(self.calls.timeout), self.context("shared-memory set-up"))
        if self._shm is not None:
            self.call_slots = CallSlots(self._shm, self.tunables, describe_call, self.calls.scratch.array,
                                        self.calls.context)
        #: Members on several hosts, the same number on each: two-level algorithms (None: flat).
        self.hierarchy = None if self._shm is not None or not self.tunables.hierarchy else \
            Hierarchy.of(mesh.host_ids, self._ranks, self._rank, self._inner_group,
                         self.tunables.hierarchy_pipeline_bytes)

    @property
    def shared(self) -> bool:
        """Whether this group's collectives may use shared memory (all members on one host)."""
        return self._shm is not None

    @property
    def plannable(self) -> bool:
        """Whether the short paths may run this group's blocking calls from cached plans:
        accord's own engine, not another's (``direct``: backend mpi's own short path)."""
        return self.direct is None

    @property
    def cma(self) -> bool:
        """Whether members may read each other's memory directly (single-copy algorithms)."""
        return self._shm is not None and self._shm.cma is not None

    @property
    def object_policy(self) -> ObjectPolicy | None:
        """What the object collectives of this group may unpickle (None: anything, as torch).

        It lives on the group, not in a global: it is about whom this rank receives from,
        it ends with the group (destroy_process_group), and the threads that stand for ranks
        in tests each have their own. New groups start with the default group's policy
        (``accord.set_object_policy`` sets it).
        """
        return self._object_policy

    @object_policy.setter
    def object_policy(self, policy: ObjectPolicy | None) -> None:
        if policy is not None and not isinstance(policy, ObjectPolicy):
            raise ArgumentTypeError(f"object_policy must be an accord.ObjectPolicy or None, got "
                                    f"{type(policy).__name__}")
        self._object_policy = policy

    # -- torch's accessors ---------------------------------------------------------------------
    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return len(self._ranks)

    def name(self) -> str:
        return self.backend

    @property
    def ranks(self) -> list[int]:
        """The global ranks of the members, in group-rank order."""
        return list(self._ranks)

    @property
    def global_rank(self) -> int:
        return self._mesh.rank

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.calls.timeout)

    def set_timeout(self, timeout: timedelta) -> None:
        self.calls.timeout = to_seconds(timeout)

    @property
    def last_seq(self) -> int:
        """The number of the last call numbered on this group (async ones included)."""
        return self.calls.last_seq

    @property
    def monitor(self) -> Any:
        """The world's monitor (set by the world): told when the group breaks (stuck report,
        flight-recorder dump); ``monitor.group_failed(group, context, exc)`` may add to a
        timeout's message."""
        return self._monitor

    @monitor.setter
    def monitor(self, monitor: Any) -> None:
        self._monitor = monitor
        self.calls.explain = None if monitor is None else \
            (lambda context, exc: monitor.group_failed(self, context, exc))

    def group_rank_of(self, global_rank: int) -> int:
        """The group rank of a global rank (ValueError if it is not a member)."""
        try:
            return self._group_rank_of[global_rank]
        except KeyError:
            raise ArgumentError(f"global rank {global_rank} is not a member of group "
                                f"{self.group_name!r} (members: {self._ranks})") from None

    def global_rank_of(self, group_rank: int) -> int:
        if not 0 <= group_rank < len(self._ranks):
            raise ArgumentError(f"group rank {group_rank} is out of range for group "
                                f"{self.group_name!r} of size {len(self._ranks)}")
        return self._ranks[group_rank]

    def __repr__(self) -> str:
        return (f"<accord.ProcessGroup {self.group_name!r} rank {self._rank}/{len(self._ranks)} "
                f"backend {self.backend}>")

    # -- running a collective ------------------------------------------------------------------
    def _where(self, global_rank: int) -> str:
        where = f"rank {global_rank}"
        if self.group_id != 0:
            where += f" (group {self.group_name!r}, group rank {self._rank})"
        return where

    def context(self, op: str, seq: int | None = None) -> str:
        """'all_reduce #12 on rank 2', plus the group and group rank for subgroups."""
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
                f"exists for {', '.join(HIERARCHICAL_ALGORITHMS)}")
        return registry.choose(collective, nbytes, len(self._ranks), self.tunables, self._shm is not None,
                               self.cma)

    def _inner_group(self, key: str, ranks: Sequence[int]) -> ProcessGroup:
        """A hidden group of some members (the hierarchy's), the same id on each of them;
        shut down with this group."""
        digest = hashlib.blake2b(f"{self.group_id}/{key}".encode(), digest_size=4).digest()
        inner = ProcessGroup(self._mesh, int.from_bytes(digest, "little") or 1, ranks, self.calls.timeout,
                             self.backend, f"{self.group_name}/{key}")
        # an ACCORD_ALGORITHM=…=hierarchical is for the outer group: the inner ones are flat
        inner.tunables = dataclasses.replace(self.tunables, algorithms={
            name: algo for name, algo in self.tunables.algorithms.items() if algo != HIERARCHICAL})
        self.companions.append(inner)
        self._inner.append(inner)
        return inner

    def twin(self, group_id: int, name: str) -> ProcessGroup:
        """A new group of the same ranks (every member makes it, in the same order), for
        checks that must not disturb this group's calls (DETAIL's argument check)."""
        return ProcessGroup(self._mesh, group_id, self._ranks, self.calls.timeout, self.backend, name)

    def fingerprint(self, op: str, algorithm: Algorithm | None, buf: Buffer | None, root: int = -1) -> Fingerprint:
        return Fingerprint(COLLECTIVES[op], algorithm.code if algorithm else 0,
                           buf.dtype_code if buf else 0, buf.count if buf else 0, root)

    def run_collective(self, op: str, fp: Fingerprint, body: Callable[[Any], None],
                       outputs: Sequence[Buffer], result: list[Any], async_op: bool,
                       timeout: float | None = None, shared: bool = False,
                       inputs: Sequence[Any] = ()) -> Work | None:
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
                return self._execute(op, self.calls.number(), fp, deadline, body, outputs, result,
                                     shared)
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

    def defer(self, op: str, run: Callable[[], Any], result: list[Any],
              inputs: Sequence[Any] = ()) -> Work:
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

    def _execute(self, op: str, seq: int, fp: Fingerprint, deadline: Deadline,
                 body: Callable[[Any], None], outputs: Sequence[Buffer], result: list[Any],
                 shared: bool) -> list[Any]:
        """Run call #seq now, in this thread, after the calls before it (run_collective)."""
        calls = self.calls
        peers = CallPeers(self, op, seq, fp, deadline)
        if self._mesh.channel_closed(self._channel):
            raise self._destroyed(op)
        if calls.broken is not None or self._channel.error is not None:
            self._raise_broken(str(peers))
        calls.await_turn(seq, deadline, peers)
        channel = self._channel
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

    def run_planned(self, op: str, fp: Fingerprint, algorithm: Algorithm, args: Sequence[Any],
                    inputs: Sequence[Any] = ()) -> None:
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
        if calls.broken is not None or self._channel.error is not None:
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

    def _run_planned_messages(self, op: str, fp: Fingerprint, algorithm: Algorithm,
                              args: Sequence[Any], inputs: Sequence[Any]) -> None:
        deadline = Deadline.after(self.calls.timeout)
        queue = self.calls.queue
        if queue.pending():
            queue.drain(self.calls.timeout, self.context(op))
        seq = self.calls.number()
        event = self._begin_event(op, inputs)
        try:
            self._execute(op, seq, fp, deadline, lambda peers: algorithm.run(peers, *args), (), [],
                          False)
        finally:
            if event is not None:
                profiling.end(event)

    def _run_profiled(self, op: str, algorithm: Algorithm, slots: CallSlots, args: Sequence[Any],
                      inputs: Sequence[Any], record: CallRecord) -> None:
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
            f"(destroy_process_group); create a new one with new_group")

    def _raise_broken(self, context: str) -> None:
        calls = self.calls
        if calls.broken is None:
            calls.broken = str(self._channel.error)
        error = PeerError(f"{context}: this group cannot be used since {calls.broken}. "
                          f"Destroy it (destroy_process_group) and create a new one")
        self._break_inner(context, error)  # members may already wait in them for this call
        raise error

    def _tell_peers(self, context: str, exc: BaseException) -> None:
        """What breaking means on accord's engine (``calls.on_break``): the channel fails, the
        peers are told (once), the hierarchy's groups break too."""
        self._channel.fail(exc, notify_peers=self._channel.error is None)
        self._break_inner(context, exc)

    def _break_inner(self, context: str, exc: BaseException) -> None:
        """Break the hierarchy's groups too: their members may wait there, not here."""
        for inner in self._inner:
            if not inner.is_broken():
                inner.calls.break_group(context, exc)

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def channel(self) -> Channel:
        return self._channel

    @property
    def mesh(self) -> Mesh:
        return self._mesh

    def is_broken(self) -> bool:
        return self.calls.broken is not None or self._channel.error is not None

    def abort(self, reason: str | None = None) -> None:
        """Break this group now: pending and later calls raise, here and on the peers, who
        are told ``reason`` (torch's ProcessGroup.abort)."""
        text = reason or f"group {self.group_name!r} was aborted on rank {self._mesh.rank}"
        self._channel.fail(PeerError(text), notify_peers=True)
        if self.calls.broken is None:
            self.calls.broken = reason or "it was aborted"

    def shutdown(self) -> None:
        """Stop the async worker, unmap shared memory, detach from the mesh (which stays open)."""
        for companion in self.companions:
            companion.shutdown()
        self.companions.clear()
        self.calls.queue.shutdown()
        self.calls.close()
        self._mesh.close_channel(self._channel, self.calls.finished)
        # The call slots hold views of the segments and bound methods of this group (a cycle
        # only the garbage collector would break): drop them first, so the mappings and
        # their descriptors go now, not whenever the collector runs.
        if self.call_slots is not None:
            self.call_slots.close()
        self.call_slots = None
        one_round.release(self.plans.values())  # their closures hold views of the segments
        self.plans = {}
        error = self._channel.error
        if error is not None and error.__traceback__ is not None:
            # The failure that broke the group keeps the failed call's frames, whose locals
            # hold this group and views of its segments: a cycle only the collector would
            # break. Clearing the frames' locals keeps the traceback and frees them now.
            traceback.clear_frames(error.__traceback__)
        if self._shm is not None:
            self._shm.close()
            self._shm = None
