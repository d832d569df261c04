"""Creating and destroying the world and its groups, and asking about them.

Owns: init_process_group (rendezvous → store → the world, which ``worlds`` builds; or, in a
process started to replace a lost rank — ``ACCORD_JOIN=1`` — joining the running job through
``admission``), destroy_process_group, new_group, the rank/size/backend queries and rank
translation. The world becomes the process's, with its exit hook, in ``adoption``; in a
program that has torch it becomes torch's default group too, and is destroyed as one, through
``sharing``. Must not know about the launcher (``ACCORD_JOIN`` is a variable of ``config``, as
``RANK`` is).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .. import config
from ..backend_names import Backend, device_backends, resolve_backend, world_provider
from ..errors import DestroyedBeforeInitError
from ..group.process_group import ProcessGroup
from ..rendezvous import rendezvous
from ..store.base import Store
from ..timeouts import DEFAULT_PG_TIMEOUT, to_seconds
from ..world import NON_GROUP_MEMBER, World, clear_scoped_world, current_world, set_process_world
from .admission import join_process_group
from .adoption import add_device_groups, adopt
from .common import resolve_group
from .group_methods import ProcessGroup as GroupMethods
from .sharing import share, unshare
from .worlds import build_world, engine_world


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: Store | None = None,
    group_name: str = "",
    pg_options: Any = None,
    device_id: Any = None,
) -> None:
    """Join the job: rendezvous, connect every rank, create the default group.

    In a program that has imported torch, the world is torch.distributed's default group too
    (torch's DDP, FSDP and DeviceMesh find it; ``ACCORD_TORCH_DEFAULT_GROUP=0`` turns that off):
    see docs/guides/torch-default-group.md.

    ``init_method`` is ``env://`` (default), ``tcp://host:port`` or ``file:///path``;
    alternatively pass ``store`` with ``rank`` and ``world_size``. ``backend`` None, "gloo"
    or "accord" selects accord's CPU backend.

    With ``ACCORD_JOIN=1`` in the environment (``accordrun --replace-workers`` sets it for
    the worker it starts in place of one that died) this process joins the running job
    instead: ``join_process_group(backend, init_method, timeout, store)``, admitted when the
    job's ranks call ``grow_group``. ``rank`` and ``world_size`` are then the job's to give:
    ``get_rank()`` says which rank this process became.

    Raises:
        ValueError: called twice, both init_method and store, a bad rank/world size, a
            missing or malformed env variable (named), an unavailable backend; with
            ACCORD_JOIN=1, a backend or init_method that cannot join a running job.
        DistTimeoutError: some ranks never joined within ``timeout`` (they are named); with
            ACCORD_JOIN=1, nobody admitted this process within ``timeout``.
    """
    if current_world(required=False) is not None:
        raise ValueError("trying to initialize the default process group twice!")
    name = resolve_backend(backend)
    devices = device_backends(backend)
    seconds = to_seconds(timeout, default=DEFAULT_PG_TIMEOUT)
    provider = world_provider(name)
    if config.joining():
        if provider is not None:
            raise ValueError(
                f"{config.JOIN.name}=1 asks this process to join a running job, and backend "
                f"{name!r} cannot take in new processes (MPI's ranks are fixed by mpiexec)"
            )
        join_process_group(backend, init_method, timeout, store)
        return
    if provider is not None:  # another engine (MPI): it finds its own ranks and needs no store
        world = engine_world(
            provider(
                init_method=init_method,
                timeout=seconds,
                world_size=world_size,
                rank=rank,
                store=store,
                kind=GroupMethods,
            ),
            name,
        )
        _with_devices(world, devices, device_id)
        adopt(world)
        share(world)
        return
    owns_store = store is None
    if store is None:
        store, rank, world_size = next(
            rendezvous(init_method or "env://", rank, world_size, timeout=timedelta(seconds=seconds))
        )
    elif init_method is not None:
        raise ValueError("init_method and store are mutually exclusive; pass one of them")
    elif world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"with store=, pass rank and world_size (got rank={rank}, world_size={world_size})")
    store.set_timeout(timedelta(seconds=seconds))
    world = build_world(store, rank, world_size, name, seconds, owns_store)
    _with_devices(world, devices, device_id)
    adopt(world)
    share(world)


def _with_devices(world: World, devices: dict[str, str], device_id: Any) -> None:
    """Give the new world's default group its device groups (torch's NCCL for CUDA tensors);
    on failure the world is taken down again and the error raised."""
    world.device_backends = devices
    try:
        if devices and world.mesh is None and world.store is not None:
            # another engine's world: a prefix of this init's own, as build_world makes one
            generation = (world.store.add("accord/device_inits", 1) - 1) // world.size
            world.store_prefix = f"accord/{generation}"
        add_device_groups(world, world.default_group, devices, device_id)
    except BaseException:
        world.destroy()
        raise


def destroy_process_group(group: Any = None) -> None:
    """Destroy ``group``, or with None the whole world: peers are told we left (GOODBYE),
    pending calls on the destroyed groups raise, and init_process_group may be called again."""
    world = current_world(required=False)
    if world is None:
        raise DestroyedBeforeInitError(
            "destroy_process_group: there is no process group to destroy (init_process_group "
            "was not called, or the world was destroyed already)"
        )
    if group is None or group is world.default_group:
        unshare(world)  # torch's default group, if it is this world, ends first
        if not clear_scoped_world():
            set_process_world(None)
        world.destroy()
        return
    if isinstance(group, int) and group == NON_GROUP_MEMBER:
        return
    if not isinstance(group, ProcessGroup) or group not in world.groups:
        raise ValueError(f"{group!r} is not a group of the current world")
    world.detach(group)


def is_initialized() -> bool:
    return current_world(required=False) is not None


def new_group(
    ranks: Any = None,
    timeout: timedelta | None = None,
    backend: str | None = None,
    pg_options: Any = None,
    use_local_synchronization: bool = False,
    group_desc: str | None = None,
    device_id: Any = None,
    sort_ranks: bool = True,
) -> Any:
    """Create a group of some ranks. Every rank must call it, in the same order as the others
    (members only, with use_local_synchronization=True). Non-members get NON_GROUP_MEMBER."""
    world = current_world()
    assert world is not None
    members = _check_ranks(ranks, world.size)
    if sort_ranks:
        members.sort()
    name = resolve_backend(backend) if backend is not None else world.backend
    devices = device_backends(backend) if backend is not None else world.device_backends
    seconds = to_seconds(timeout, default=world.default_group.timeout)
    group_id, n = world.next_group_id(members)
    if world.rank not in members:
        return NON_GROUP_MEMBER
    pg = world.make_group(group_id, members, seconds, name, f"pg{n}:{group_id:08x}", group_desc)
    pg.object_policy = getattr(world.default_group, "object_policy", None)  # set_object_policy
    try:
        add_device_groups(world, pg, devices, device_id)
    except BaseException:
        pg.shutdown()
        raise
    world.attach(pg)
    return pg


def _check_ranks(ranks: Any, size: int) -> list[int]:
    if ranks is None:
        return list(range(size))
    try:
        members = [int(r) for r in ranks]
    except (TypeError, ValueError):
        raise TypeError(f"ranks must be a list of ints, got {ranks!r}") from None
    bad = [r for r in members if not 0 <= r < size]
    if bad:
        raise ValueError(f"ranks {bad} are out of range for a world of size {size}")
    if len(set(members)) != len(members):
        raise ValueError(f"ranks {members} contain duplicates")
    if not members:
        raise ValueError("a group needs at least one rank")
    return members


def get_rank(group: Any = None) -> int:
    if isinstance(group, int) and not isinstance(group, bool) and group == NON_GROUP_MEMBER:
        return -1
    pg = resolve_group(group, "get_rank")
    return -1 if pg is None else pg.rank()


def get_world_size(group: Any = None) -> int:
    if isinstance(group, int) and not isinstance(group, bool) and group == NON_GROUP_MEMBER:
        return -1
    pg = resolve_group(group, "get_world_size")
    return -1 if pg is None else pg.size()


def get_backend(group: Any = None) -> Backend:
    pg = resolve_group(group, "get_backend")
    if pg is None:
        raise ValueError("Invalid process group specified")
    return Backend(getattr(pg, "backend", current_world().backend))  # type: ignore[union-attr]


def get_backend_config(group: Any = None) -> str:
    """ "cpu:<backend>", followed by the group's device backends (",cuda:nccl")."""
    pg = resolve_group(group, "get_backend_config")
    devices = "".join(f",{kind}:{dg.backend_name}" for kind, dg in getattr(pg, "device_groups", {}).items())
    return f"cpu:{get_backend(group)}{devices}"


def get_process_group_ranks(group: Any) -> list[int]:
    pg = resolve_group(group, "get_process_group_ranks")
    if pg is None:
        raise ValueError("this rank is not a member of the group")
    return pg.ranks


def get_group_rank(group: Any, global_rank: int) -> int:
    pg = resolve_group(group, "get_group_rank")
    if pg is None:
        raise ValueError(f"Global rank {global_rank} is not part of group {group}")
    return pg.group_rank_of(global_rank)


def get_global_rank(group: Any, group_rank: int) -> int:
    pg = resolve_group(group, "get_global_rank")
    if pg is None:
        raise ValueError(f"Group rank {group_rank} is not part of group {group}")
    return pg.global_rank_of(group_rank)


def get_pg_count() -> int:
    """Process groups made so far on this rank, as torch counts them: the default group plus
    every new_group() call (member or not), destroyed ones included, until the world ends."""
    world = current_world(required=False)
    return 0 if world is None else 1 + world.groups_created


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """LOCAL_RANK from the launcher, else ``fallback_rank``, else RuntimeError."""
    local = config.env_int(config.LOCAL_RANK)
    if local is not None:
        return local
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError(
        "LOCAL_RANK is not in the environment: launch with accordrun/torchrun, or pass fallback_rank"
    )


def is_torchelastic_launched() -> bool:
    return config.TORCHELASTIC_RUN_ID.raw() is not None


def dump_flight_recorder(path: str | None = None, reason: str = "on demand") -> str | None:
    """Write this rank's flight recorder (the recent calls of every group, their fingerprints,
    times and states) as JSON to ``path``, default ``<dir>/rank<N>.json`` with ``<dir>`` from
    ACCORD_FLIGHT_RECORDER_DIR. Returns the path (None: dumps are off and no path was given).
    ``accord flight-recorder <dir>`` merges a job's files and shows where ranks diverge."""
    world = current_world()
    assert world is not None
    return world.monitor.dump(reason, path) if world.monitor is not None else None


def comm_stats() -> dict[str, dict[str, dict[str, Any]]]:
    """Per group (by name) and operation: ``calls``, ``bytes``, ``total_s``, ``max_s``,
    ``mean_s``, ``failed`` — of this rank, since the group was created."""
    world = current_world()
    assert world is not None
    return {g.group_name: g.recorder.stats() for g in world.all_groups()}
