"""Every world is built here: accord's own and an engine's that finds its own ranks.

Owns: ``build_world`` (the mesh through the store, the default group on it — of the API's
class, ``group_methods.ProcessGroup``, whose subgroups are of it too —, init's last
barrier: init_process_group's core, and the torch backend's; tests call it with a loopback
mesh factory), ``engine_world`` (the world of an engine such as MPI from its
``group.engine.WorldParts``), and what both do alike (``_watch``): the world's monitor, its
progress board on the store and the job's label. Must not know about rendezvous, the launcher
or the public API's arguments.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta

from .. import config, heap
from ..backend_names import Backend
from ..diagnostics.monitor import Monitor
from ..diagnostics.progress import ProgressBoard
from ..group.engine import DEFAULT_GROUP_DESC, DEFAULT_GROUP_NAME, WorldParts
from ..group.mesh_barrier import mesh_barrier
from ..group.mesh_engine import mesh_group
from ..group.process_group import ProcessGroup
from ..store.base import Store
from ..timeouts import Deadline
from ..transport.bootstrap import connect_mesh
from ..transport.mesh import Mesh
from ..world import World
from .group_methods import ProcessGroup as GroupMethods

MeshFactory = Callable[[Store, str, int, int, Deadline], Mesh]


def build_world(
    store: Store | None,
    rank: int,
    world_size: int,
    backend: str,
    timeout: float,
    owns_store: bool,
    mesh_factory: MeshFactory = connect_mesh,
    prefix: str | None = None,
) -> World:
    """Make the mesh and the default group for one rank (init_process_group's core; tests
    call it with a loopback mesh factory). ``prefix``: the store keys this world meets under
    (None: the next init's, counted on the store; a membership change names its own)."""
    if store is None:
        raise ValueError("a store is required")
    config.prefer_huge_pages()  # for the large torch tensors the program is about to make
    heap.raise_mmap_threshold()  # (so that those come from the heap, not fresh pages each)
    if prefix is None:
        generation = (store.add("accord/init_count", 1) - 1) // world_size
        prefix = f"accord/{generation}"
    deadline = Deadline.after(timeout)
    mesh = mesh_factory(store, prefix, rank, world_size, deadline)
    if backend in Backend._plugins:
        func = Backend._plugins[backend][0]
        default_group = func(store, rank, world_size, timedelta(seconds=timeout))
    else:
        default_group = mesh_group(
            mesh, 0, range(world_size), timeout, backend, DEFAULT_GROUP_NAME, DEFAULT_GROUP_DESC, GroupMethods
        )
    world = World(store, mesh, default_group, backend, owns_store)
    world.store_prefix = prefix
    try:
        _watch(world, store, prefix, rank, world_size, _job_label(store, prefix, rank))
        # Every store read of init is above: nobody leaves init (and perhaps exits, taking
        # the store it hosts along) before every rank is done with them.
        mesh_barrier(mesh, deadline)
    except BaseException:
        world.destroy()
        raise
    return world


def engine_world(parts: WorldParts, backend: str) -> World:
    """The world of an engine that found its own ranks (backend "mpi"), watched as accord's
    own worlds are (``build_world``)."""
    world = World(parts.store, None, parts.default_group, backend, parts.owns_store)
    try:
        _watch(world, parts.store, parts.prefix, parts.rank, parts.size, parts.job_label)
    except BaseException:
        world.destroy()
        raise
    return world


def _watch(
    world: World, store: Store | None, prefix: str, rank: int, world_size: int, job_label: str
) -> None:
    """The world's monitor (stuck reports, flight-recorder dumps), with its progress board
    on ``store`` (none without one), watching the default group."""
    board = None if store is None else _progress_board(store, prefix, rank, world_size)
    world.monitor = Monitor(rank, world_size, board, world.all_groups, job_label)
    if isinstance(world.default_group, ProcessGroup):
        world.monitor.attach(world.default_group)


def _job_label(store: Store, prefix: str, rank: int) -> str:
    """The job's name, the same on every rank (it names the flight-recorder directory)."""
    label = config.run_id()
    if label:
        return label
    key = f"{prefix}/job_label"
    if rank == 0:
        label = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        store.set(key, label)
        return label
    return store.get(key).decode("utf-8", "replace")


def _progress_board(store: Store, prefix: str, rank: int, world_size: int) -> ProgressBoard | None:
    interval = config.progress_interval()
    if world_size < 2 or interval <= 0:
        return None
    try:
        handle = store.clone()  # its own connection: a user's blocking get never delays it
    except Exception:  # noqa: BLE001 — a store without clone: share the handle (it is locked)
        handle = store
    return ProgressBoard(handle, prefix, rank, interval, owns_store=handle is not store)
