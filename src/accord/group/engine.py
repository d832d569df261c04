"""The engine interface: what runs a process group's calls.

Owns: ``Engine``, the ``Protocol`` that a ``ProcessGroup`` is composed with,
``Planner``, the capabilities an engine has when the short paths may plan its blocking calls
(``Engine.plannable``), and ``WorldParts``, what an engine that finds its own ranks (MPI)
hands the API to build a world from (``api.lifecycle`` builds every world the same way). Two
engines implement it: accord's own, over a mesh of shared memory and TCP
(``group.mesh_engine.MeshEngine``), and MPI's (``engines.mpi.engine.MpiEngine``).
Everything above an engine — argument checks, buffers, fingerprints, the call state
(``group.calls``), the flight recorder, Work, the object collectives — is the group's and
the same on both. Must not know about meshes, MPI or the API.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from ..arrays import Buffer
from ..collectives.registry import Algorithm
from ..transport.wire import Fingerprint
from .work import Work

if TYPE_CHECKING:
    from ..transport.mesh import Channel, Mesh
    from .hierarchy import Hierarchy
    from .shared_memory import CallSlots

#: A ``group.process_group.ProcessGroup`` (not imported: it imports this module)
ProcessGroup = Any

#: What a ``defer`` with ``make`` returns: what ``make`` made.
_Made = TypeVar("_Made")


class P2p(Protocol):
    """An engine's own sends and receives (``Engine.p2p``; MPI's: ``engines.mpi.p2p``)."""

    def send(self, tensor: Any, dst: int, tag: int) -> None: ...

    def recv(self, tensor: Any, src: int | None, tag: int) -> int: ...

    def isend(self, tensor: Any, dst: int, tag: int) -> Work: ...

    def irecv(self, tensor: Any, src: int | None, tag: int) -> Work: ...

    def send_frames(self, frames: list[Any], dst: int, op: str) -> None: ...

    def recv_frames(self, src: int | None, op: str) -> tuple[list[Any], int]: ...


class Engine(Protocol):
    """What a ``ProcessGroup`` asks of the engine that runs its calls."""

    #: Whether the short paths may run this engine's blocking calls from cached plans (then
    #: it is a ``Planner`` too). accord's engine is; MPI's has short paths of its own.
    plannable: bool

    # Read-only members (properties here, so that an engine may give them as properties,
    # class constants or attributes).
    @property
    def shared(self) -> bool:
        """Whether the members share memory (one host): shared-memory algorithms may run."""
        ...

    @property
    def cma(self) -> bool:
        """Whether members may read each other's memory directly (single-copy algorithms)."""
        ...

    @property
    def p2p(self) -> P2p | None:
        """Who carries the group's sends and receives when not accord's mesh; None: the mesh."""
        ...

    @property
    def hierarchy(self) -> Hierarchy | None:
        """The two-level plan of a group whose members are on several hosts (None: flat)."""
        ...

    #: The engine's own short paths of blocking calls (methods that return False to take the
    #: long path); None: accord's shared-memory short paths (``group.short_paths``).
    direct: Any

    def choose_algorithm(self, collective: str, nbytes: int) -> Algorithm:
        """The algorithm of a ``collective`` call moving ``nbytes`` on this group."""
        ...

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
        """Run ``body`` as the group's next call: now (None), or as the returned Work."""
        ...

    def twin(self, group_id: int, name: str) -> ProcessGroup:
        """A new group of the same members, made by each of them in the same order."""
        ...

    def subgroup(
        self, group_id: int, ranks: Sequence[int], timeout: float, backend: str, name: str, desc: str | None
    ) -> ProcessGroup:
        """A new group of ``ranks`` (global ranks, this one among them), made by its members."""
        ...

    def is_broken(self) -> bool:
        """Whether the group cannot be used any more (here or as a peer said)."""
        ...

    def abort(self, reason: str | None) -> None:
        """Break the group now (torch's ProcessGroup.abort)."""
        ...

    def shutdown(self) -> None:
        """Release what the engine holds for the group (destroy_process_group)."""
        ...


class Planner(Engine, Protocol):
    """An engine whose blocking calls the short paths plan (``plannable``): accord's. A
    group's engine is one where ``plannable`` says so (``ProcessGroup.planner``)."""

    #: The shared-memory slots (None: the members do not share memory).
    call_slots: CallSlots | None
    #: The group's channel on the mesh and the mesh (accord's p2p and object collectives).
    channel: Channel
    mesh: Mesh

    def run_planned(
        self, op: str, fp: Fingerprint, algorithm: Algorithm, args: Sequence[Any], inputs: Sequence[Any] = ()
    ) -> None:
        """Run a blocking call whose plan the caller already has."""
        ...

    @overload
    def defer(
        self,
        op: str,
        run: Callable[[], Any],
        result: list[Any],
        inputs: Sequence[Any] = (),
        make: None = None,
    ) -> Work: ...

    @overload
    def defer(
        self,
        op: str,
        run: Callable[[], Any],
        result: list[Any],
        inputs: Sequence[Any],
        make: Callable[..., _Made],
    ) -> _Made: ...

    def defer(
        self,
        op: str,
        run: Callable[[], Any],
        result: list[Any],
        inputs: Sequence[Any] = (),
        make: Callable[..., Any] | None = None,
    ) -> Any:
        """Queue ``run`` (an async call run as the blocking one) and return its Work (or
        the Work ``make`` made, which is its own queue item: ``executor.QueuedMethods``)."""
        ...


#: The default group's name and description, torch's: ``group_name`` "0" (torch numbers its
#: groups from 0 in the order they are made), ``group_desc`` "default_pg"
DEFAULT_GROUP_NAME, DEFAULT_GROUP_DESC = "0", "default_pg"


@dataclass
class WorldParts:
    """What an engine that finds its own ranks gives the API for a world (backend "mpi":
    ``engines.mpi.world.init_world``); the API adds the monitor and progress board."""

    rank: int
    size: int
    default_group: Any  # the world's ProcessGroup on the engine
    #: where the progress board posts (None: no board; a timeout cannot name where the
    #: other ranks are), whether the world closes it, and the board's key prefix
    store: Any
    owns_store: bool
    prefix: str
    job_label: str  # the same on every rank (it names the flight-recorder directory)
