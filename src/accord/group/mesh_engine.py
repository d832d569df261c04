"""accord's own engine: a group's calls over a mesh (shared memory on a host, TCP between).

Owns: ``MeshEngine`` — the group's channel on the mesh, its shared-memory domain and call
slots (members on one host), its hierarchy and inner groups (members on several hosts, the
same number on each), the algorithm choice, subgroups, and what breaking the group means
here: the channel fails, the peers are told, the inner groups break; then shutting down.
The three ways a call runs — in the caller's thread (``run_collective``), queued
(``defer``), from a cached plan (``run_planned``: the short paths) — are ``mesh_calls``'
(``MeshCalls``, a mixin of ``MeshEngine``: split from here so each module stays under 400
lines). ``mesh_group`` makes a ProcessGroup on it. Implements ``group.engine.Planner``. Must
not know about environment variables, rendezvous, the API or MPI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import traceback
import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..collectives import registry
from ..collectives.registry import Algorithm
from ..errors import DestroyedGroupError, PeerError
from ..timeouts import Deadline
from ..transport.mesh import Channel, Mesh
from ..transport.shm import ShmDomain, oversubscribed
from . import one_round, shared_memory
from .call import describe_call
from .executor import DEFAULT_PICKUP_DELAY, OVERSUBSCRIBED_PICKUP_DELAY, AsyncExecutor
from .hierarchy import ALGORITHMS as HIERARCHICAL_ALGORITHMS
from .hierarchy import HIERARCHICAL, Hierarchy
from .mesh_calls import MeshCalls
from .process_group import ProcessGroup
from .shared_memory import CallSlots


def mesh_group(
    mesh: Mesh,
    group_id: int,
    ranks: Sequence[int],
    timeout: timedelta | float,
    backend: str,
    name: str,
    desc: str | None = None,
    kind: type[ProcessGroup] = ProcessGroup,
) -> ProcessGroup:
    """A process group of ``ranks`` (mesh ranks, this one among them) on accord's engine;
    ``kind``: its class (the API hands out a subclass with torch's method-level API)."""
    return kind(
        lambda group: MeshEngine(group, mesh),
        ranks,
        list(ranks).index(mesh.rank),
        group_id,
        timeout,
        backend,
        name,
        desc,
    )


class MeshEngine(MeshCalls):
    """accord's engine for one group (see the module docstring)."""

    plannable = True
    p2p = None  # the mesh carries sends and receives (group.p2p)
    direct = None  # the short paths are accord's own (group.short_paths)

    def __init__(self, group: ProcessGroup, mesh: Mesh) -> None:
        # The group owns its engine, not the reverse: a weak reference, so that a destroyed
        # group (and its recorder, queue, plans) goes when its last user lets go of it, at
        # once, not at the garbage collector's next pass.
        self._group = weakref.ref(group)
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
        #: the thread running a queued call inside its profiler event (0: none): the calls it
        #: makes open none of their own (``call_events``); another thread's calls still do
        self.event_thread = 0
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
    def group(self) -> ProcessGroup:
        """The group this engine runs (alive while anyone can call it)."""
        group = self._group()
        assert group is not None, "a MeshEngine outlived its group"
        return group

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
        return mesh_group(
            self.mesh,
            group_id,
            self.members,
            self.calls.timeout,
            self.group.backend,
            name,
            None,
            type(self.group),
        )

    def subgroup(
        self, group_id: int, ranks: Sequence[int], timeout: float, backend: str, name: str, desc: str | None
    ) -> ProcessGroup:
        """A group of ``ranks`` on the same mesh (new_group: every member makes it), of this
        group's class."""
        return mesh_group(self.mesh, group_id, ranks, timeout, backend, name, desc, type(self.group))

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
            f"Destroy it (destroy_process_group) and create a new one",
            peer=getattr(self.channel.error, "peer", None),  # (the lost rank, when one was)
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
