"""ProcessGroup: a set of ranks that run collectives together, composed with the engine that
runs their calls.

Owns: membership and rank translation (global ↔ group ranks), torch's accessors (rank, size,
timeout, name), the group's call state (``calls``: a ``CallSequencer``, with the flight
recorder), the fingerprint of a call, the object policy, the short paths' plan cache
(``plans``), the hidden companion groups (DETAIL's, the hierarchy's), and the lifetime that
ties them together. How a call runs is the engine's (``engine``: ``group.engine.Engine``,
accord's ``MeshEngine`` or backend mpi's ``MpiEngine``), made for the group by the factory
given to the constructor. Must not know about meshes, shared memory, MPI, environment
variables, rendezvous or the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, cast

from .. import config
from ..arrays import Buffer
from ..collectives.registry import COLLECTIVES, Algorithm
from ..errors import ArgumentError, ArgumentTypeError
from ..timeouts import to_seconds
from ..transport.wire import Fingerprint
from .calls import CallSequencer
from .engine import Engine, Planner
from .pickling import ObjectPolicy
from .recorder import FlightRecorder


class ProcessGroup:
    """A set of ranks that run collectives together (torch.distributed.ProcessGroup)."""

    #: {device kind: group} carrying this group's tensors of other devices (torch's NCCL for
    #: "cuda", made by the world); the API sends a call there when one ``claims`` its tensor.
    device_groups: dict[str, Any] = {}  # noqa: RUF012 — never mutated: replaced per instance
    #: Calls on this group that this rank left by an exception (counted by the API): a refused
    #: argument, an object that does not pickle, a timeout… The other ranks may have gone on,
    #: and their messages to this rank may still arrive (backend mpi then keeps the group's
    #: communicators at destroy rather than let MPI hand those messages to a new one).
    calls_raised = 0

    def __init__(
        self,
        engine: Callable[[ProcessGroup], Engine],
        members: Sequence[int],
        rank: int,
        group_id: int,
        timeout: timedelta | float,
        backend: str,
        name: str,
        desc: str | None = None,
    ) -> None:
        """``members``: the global ranks, in group-rank order; ``rank``: this rank's place
        among them; ``engine(group)`` makes the engine (the group's state is set by then)."""
        self._ranks = list(members)
        self.members = self._ranks  # (the same list: read it, never change it)
        #: global rank → group rank, for every member (read it, never change it)
        self.group_ranks = {g: i for i, g in enumerate(self._ranks)}
        self._rank = rank
        self.tunables = config.Tunables.from_env()
        self.backend = backend
        self.group_name = name
        self.group_desc = desc or name
        self.group_id = group_id
        where = f"rank {self._ranks[rank]}"
        if group_id != 0:
            where += f" (group {name!r}, group rank {rank})"
        #: The group's call state: numbers, turns, broken state, timeout, recorder, scratch
        self.calls = CallSequencer(
            to_seconds(timeout), where, FlightRecorder(self.tunables.flight_recorder_size)
        )
        self.recorder = self.calls.recorder
        self.plans: dict[Any, tuple[Any, ...] | None] = {}  # per call signature: what the short path needs
        self._object_policy: ObjectPolicy | None = None
        self._monitor: Any = None
        #: Hidden groups of the same ranks (DETAIL's check) or some of them (the hierarchy's):
        #: shut down with this one.
        self.companions: list[ProcessGroup] = []
        self.engine: Engine = engine(self)
        #: The same engine, typed as what the short paths and accord's p2p use of it: valid
        #: only where ``engine.plannable`` (they run only there), unchecked at run time.
        self.planner: Planner = cast(Planner, self.engine)

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
            raise ArgumentTypeError(
                f"object_policy must be an accord.ObjectPolicy or None, got {type(policy).__name__}"
            )
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
        return self._ranks[self._rank]

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
        self.calls.explain = (
            None if monitor is None else (lambda context, exc: monitor.group_failed(self, context, exc))
        )

    def group_rank_of(self, global_rank: int) -> int:
        """The group rank of a global rank (ValueError if it is not a member)."""
        try:
            return self.group_ranks[global_rank]
        except KeyError:
            raise ArgumentError(
                f"global rank {global_rank} is not a member of group "
                f"{self.group_name!r} (members: {self._ranks})"
            ) from None

    def global_rank_of(self, group_rank: int) -> int:
        if not 0 <= group_rank < len(self._ranks):
            raise ArgumentError(
                f"group rank {group_rank} is out of range for group "
                f"{self.group_name!r} of size {len(self._ranks)}"
            )
        return self._ranks[group_rank]

    def __repr__(self) -> str:
        return (
            f"<accord.ProcessGroup {self.group_name!r} rank {self._rank}/{len(self._ranks)} "
            f"backend {self.backend}>"
        )

    # -- calls -------------------------------------------------------------------------------
    def context(self, op: str, seq: int | None = None) -> str:
        """'all_reduce #12 on rank 2', plus the group and group rank for subgroups."""
        return self.calls.context(op, seq)

    def fingerprint(
        self, op: str, algorithm: Algorithm | None, buf: Buffer | None, root: int = -1
    ) -> Fingerprint:
        """What every rank's call must agree on: the collective, algorithm, dtype, count, root."""
        return Fingerprint(
            COLLECTIVES[op],
            algorithm.code if algorithm else 0,
            buf.dtype_code if buf else 0,
            buf.count if buf else 0,
            root,
        )

    def twin(self, group_id: int, name: str) -> ProcessGroup:
        """A new group of the same ranks on the same engine (every member makes it, in the
        same order), for checks that must not disturb this group's calls (DETAIL's)."""
        twin: ProcessGroup = self.engine.twin(group_id, name)  # (the Engine protocol says Any)
        return twin

    def subgroup(
        self, group_id: int, ranks: Sequence[int], timeout: float, backend: str, name: str, desc: str | None
    ) -> ProcessGroup:
        """A new group of ``ranks`` (global ranks, this one among them) on the same engine."""
        group: ProcessGroup = self.engine.subgroup(group_id, ranks, timeout, backend, name, desc)
        return group

    # -- lifetime ----------------------------------------------------------------------------
    def is_broken(self) -> bool:
        return self.engine.is_broken()

    def abort(self, reason: str | None = None) -> None:
        """Break this group now: pending and later calls raise, here and on the peers where
        the engine can tell them, who are told ``reason`` (torch's ProcessGroup.abort)."""
        self.engine.abort(reason)

    def shutdown(self) -> None:
        """Shut the companions down, then the engine (async worker, shared memory, channel)."""
        for companion in self.companions:
            companion.shutdown()
        self.companions.clear()
        self.engine.shutdown()
        self.calls.close()
