"""The World (what init_process_group creates) and the one default World of the process.

Owns: ``World`` (store, mesh, default group, subgroups and their ids), the process default
(the single piece of module-level mutable state in accord) with a per-thread override for
tests (``world_scope``), and torch's ``GroupMember`` / ``group`` handles. Must not know about
the launcher.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .errors import InternalError, NotInitializedError
from .group.mesh_engine import mesh_group
from .group.process_group import ProcessGroup
from .store.base import Store
from .transport.mesh import Mesh


class World:
    """The default group of a job, the mesh under it, and every group made from it."""

    def __init__(
        self,
        store: Store | None,
        mesh: Mesh | None,
        default_group: Any,
        backend: str,
        owns_store: bool,
        monitor: Any = None,
    ) -> None:
        self.store = store
        self.monitor = monitor  # diagnostics.monitor.Monitor: stuck reports, dumps, statistics
        self.mesh = mesh  # None: another engine carries the groups (engines.mpi)
        self.default_group = default_group
        self.backend = backend
        self.rank = mesh.rank if mesh is not None else default_group.global_rank
        self.size = mesh.size if mesh is not None else default_group.size()
        #: Extra work for destroy() (another engine's resources), run after the groups stop.
        self.on_destroy: list[Any] = []
        #: {device kind: backend} whose tensors go to a torch group ({"cuda": "nccl"}), and
        #: the store prefix under which this world's groups make theirs.
        self.device_backends: dict[str, str] = {}
        self.store_prefix = "accord"
        self.groups: list[ProcessGroup] = []
        self.groups_created = 0  # every new_group() call on this rank, member or not (torch's count)
        self.changes = 0  # membership changes (shrink_group, grow_group) that led to this world
        #: what each of them was, oldest first (``api.membership.change``): the flight
        #: recorder's dumps and the stuck report show it (ranks were renumbered)
        self.membership: list[dict[str, Any]] = []
        #: {(file, line): calls} of ``accord.breakpoint(skip=…)`` (``api.handles``)
        self.breakpoint_counts: dict[tuple[str, int], int] = {}
        self._owns_store = owns_store
        self._group_counts: dict[tuple[int, ...], int] = {}
        self._lock = threading.Lock()

    def next_group_id(self, ranks: Sequence[int]) -> tuple[int, int]:
        """(id, n): the n-th group with these ranks gets the same id on every member, even
        when non-members do not call new_group (use_local_synchronization)."""
        key = tuple(ranks)
        with self._lock:
            n = self._group_counts.get(key, 0) + 1
            self._group_counts[key] = n
            self.groups_created += 1
        digest = hashlib.blake2b(f"{key}/{n}".encode(), digest_size=4).digest()
        group_id = int.from_bytes(digest, "little") or 1  # 0 is the default group
        if any(g.group_id == group_id for g in self.groups):
            raise InternalError(f"group id collision for ranks {list(key)}; please report it")
        return group_id, n

    def make_group(
        self, group_id: int, ranks: Sequence[int], timeout: float, backend: str, name: str, desc: str | None
    ) -> ProcessGroup:
        """A new group of ``ranks`` (this rank among them) on this world's engine (the
        default group's: accord's mesh, or e.g. an MPI communicator; accord's mesh when the
        default group is a plugin backend's)."""
        if isinstance(self.default_group, ProcessGroup):
            return self.default_group.subgroup(group_id, ranks, timeout, backend, name, desc)
        assert self.mesh is not None
        return mesh_group(self.mesh, group_id, ranks, timeout, backend, name, desc)

    def all_groups(self) -> list[ProcessGroup]:
        """The default group, then every live subgroup of this rank."""
        return [g for g in [self.default_group, *self.groups] if isinstance(g, ProcessGroup)]

    def attach(self, group: ProcessGroup) -> None:
        """A new subgroup of this world: remember it, and let the monitor watch it."""
        self.groups.append(group)
        if self.monitor is not None:
            self.monitor.attach(group)

    def detach(self, group: ProcessGroup) -> None:
        """Forget one subgroup (destroy_process_group(group)) and stop it."""
        self.groups.remove(group)
        if self.monitor is not None:
            self.monitor.detach(group)
        group.shutdown()
        _close_devices(group)

    def hand_over_store(self) -> bool:
        """Keep the store open when this world is destroyed (the world that follows it, after
        a membership change, takes it over); whether this world owned it."""
        owned, self._owns_store = self._owns_store, False
        return owned

    def will_move(self) -> None:
        """This rank goes on in the job's next world: when this world is destroyed (by
        whoever destroys it: torch's destroy_process_group), its GOODBYE says so."""
        if self.mesh is not None:
            self.mesh.moving = True

    def destroy(self, moving: bool = False) -> None:
        """Stop every group, say GOODBYE to every peer, release the store if we made it.
        ``moving``: this rank goes on in the job's next world (a membership change), and its
        GOODBYE says so (the peers do not count it among the lost ranks)."""
        if self.mesh is not None:
            self.mesh.leaving = True  # GOODBYE tells the peers about every group at once
            self.mesh.moving = self.mesh.moving or moving
        for group in [*self.groups, self.default_group]:
            if self.monitor is not None and isinstance(group, ProcessGroup):
                self.monitor.detach(group)
            shutdown = getattr(group, "shutdown", None)
            if shutdown is not None:
                shutdown()
            _close_devices(group)
        if self.monitor is not None:
            self.monitor.close()
        for callback in self.on_destroy:
            callback()
        if self.mesh is not None:
            self.mesh.close()
        if self._owns_store and self.store is not None:
            self.store.close()


def _close_devices(group: Any) -> None:
    """Shut the device groups (torch's NCCL) of one of our groups down."""
    for device_group in getattr(group, "device_groups", {}).values():
        device_group.close()


#: The process's world (``set_process_world``), and a thread's own (``world_scope``, which
#: tests use to run ranks as threads) ahead of it: read them through ``current_world``, or
#: as ``scoped_world.get() or process_world`` where a call's few µs count (the API).
process_world: World | None = None
scoped_world: contextvars.ContextVar[World | None] = contextvars.ContextVar("accord_world", default=None)


def current_world(required: bool = True) -> World | None:
    world = scoped_world.get() or process_world
    if world is None and required:
        raise NotInitializedError(
            "Default process group has not been initialized, please make sure to call init_process_group."
        )
    return world


def set_process_world(world: World | None) -> None:
    global process_world
    process_world = world


def replace_world(old: World | None, new: World | None) -> None:
    """Put ``new`` where ``old`` is current: this thread's scoped world if ``old`` is it
    (tests run ranks as threads), else the process's world."""
    if scoped_world.get() is old:
        scoped_world.set(new)
    else:
        set_process_world(new)


@contextlib.contextmanager
def world_scope(world: World) -> Iterator[World]:
    """Make ``world`` current for this thread only (tests run ranks as threads)."""
    token = scoped_world.set(world)
    try:
        yield world
    finally:
        scoped_world.reset(token)


def clear_scoped_world() -> bool:
    """Forget this thread's scoped world (after destroy_process_group in a scope)."""
    if scoped_world.get() is not None:
        scoped_world.set(None)
        return True
    return False


class _NonGroupMember(int):
    """What new_group returns on ranks outside the group (torch: -100)."""

    def __repr__(self) -> str:
        return "GroupMember.NON_GROUP_MEMBER"


NON_GROUP_MEMBER = _NonGroupMember(-100)


class _WorldMeta(type):
    @property
    def WORLD(cls) -> Any:  # noqa: N802 — torch's name
        world = current_world(required=False)
        return world.default_group if world is not None else None


class GroupMember(metaclass=_WorldMeta):
    """torch's handles: ``GroupMember.WORLD`` (the default group) and ``NON_GROUP_MEMBER``."""

    NON_GROUP_MEMBER = NON_GROUP_MEMBER


class group(metaclass=_WorldMeta):  # noqa: N801 — torch's name (dist.group.WORLD)
    """``accord.group.WORLD``: the default group, as ``torch.distributed.group.WORLD``."""
