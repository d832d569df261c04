"""The accord world behind torch's default group, and the groups torch makes on it.

Owns: the creator torch calls for every group of backend "accord" (``create``): the default
group builds accord's world over the store torch hands it (a TorchStore; no second store, no
extra port), and every later group of the same job is an accord subgroup on that world's mesh
(its id derived from torch's group name, which every member shares); a group made while the
default group is not accord's gets a world of its own. Also the process-level hooks (GOODBYE
at exit, SIGUSR1 dumps, fail-fast) for that world. The one piece of module state here is the
current backend world, the counterpart of torch's own default group (and, per thread, whether
``membership`` is making the next one: ``moving``, or whether ``default_group`` is handing
torch a world accord made already: ``adopting``, when the default group wraps that world's
default group and nothing new is built). In a process that is to join a running
job (``ACCORD_JOIN=1``: a replacement accordrun started) torch's own ``init_process_group``
is refused at once — it cannot join, and would wait out its timeout for ranks that never
come — with a pointer to ``join_process_group``. Must not know about the launcher.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from ... import config
from ...api.adoption import install_process_hooks
from ...api.worlds import build_world
from ...errors import InternalError
from ...group.mesh_barrier import INIT_BARRIER_GROUP
from ...world import World
from .backend import BACKEND_NAME, AccordProcessGroup
from .store import TorchStore

_lock = threading.Lock()
_default: World | None = None  # the world behind torch's default group, while it is accord's
_moving = threading.local()  # .active: membership is making torch's next default group
_adopting = threading.local()  # .world, .ended: torch's next default group is that world


def current_world(required: bool = False) -> World | None:
    """The accord world behind torch's default group (None when it is not accord's)."""
    return _default


def create(options: Any, backend_options: Any = None) -> AccordProcessGroup:
    """torch's creator (``extended_api=True``): one accord group for torch's group."""
    ranks = [int(r) for r in (getattr(options, "global_ranks_in_group", None) or [])]
    name = str(getattr(options, "group_id", "") or "")
    seconds = _seconds(getattr(options, "timeout", None))
    rank, size = int(options.group_rank), int(options.group_size)
    adopted = getattr(_adopting, "world", None)
    if adopted is not None and not ranks:
        return _adopt(adopted, rank, size, _adopting.ended)
    with _lock:
        world = _default
    if world is not None and ranks and len(ranks) <= world.size and max(ranks) < world.size:
        return _subgroup(world, ranks, name, seconds)
    return _own_world(TorchStore(options.store), rank, size, name, seconds, is_default=not ranks)


def create_simple(store: Any, rank: int, size: int, timeout: timedelta) -> AccordProcessGroup:
    """torch's creator without ``extended_api`` (for torch versions that call it so)."""
    return _own_world(TorchStore(store), rank, size, "", _seconds(timeout), is_default=True)


@contextmanager
def moving() -> Iterator[None]:
    """While a membership change (shrink, grow, join) makes torch's next default group."""
    _moving.active = True
    try:
        yield
    finally:
        _moving.active = False


@contextmanager
def adopting(world: World, ended: Callable[[], None]) -> Iterator[None]:
    """While torch's ``init_process_group`` makes its default group from ``world`` (accord's
    own, already running); ``ended`` is called when torch shuts that group down."""
    _adopting.world, _adopting.ended = world, ended
    try:
        yield
    finally:
        _adopting.world = _adopting.ended = None


def _adopt(world: World, rank: int, size: int, ended: Callable[[], None]) -> AccordProcessGroup:
    """torch's default group over ``world``'s own default group: no second rendezvous."""
    global _default
    if (rank, size) != (world.rank, world.size):
        raise InternalError(
            f"torch asked for rank {rank} of {size} as its default group, and accord's world is "
            f"rank {world.rank} of {world.size}; please report it"
        )

    def shutdown(_: AccordProcessGroup) -> None:
        global _default
        with _lock:
            if _default is world:
                _default = None
        ended()

    with _lock:
        _default = world
    return AccordProcessGroup(world.default_group, on_shutdown=shutdown)


def _own_world(
    store: TorchStore, rank: int, size: int, name: str, seconds: float, is_default: bool
) -> AccordProcessGroup:
    global _default
    if is_default and config.joining() and not getattr(_moving, "active", False):
        raise ValueError(
            f"{config.JOIN.name}=1: this process is to join a running job in the place of a lost "
            f"rank (accordrun --replace-workers started it), which torch.distributed."
            f"init_process_group cannot do: call accord.integrations.torch.join_process_group() "
            f"instead (torch's default group is then the job's)"
        )
    world = build_world(store, rank, size, BACKEND_NAME, seconds, owns_store=False)
    group = world.default_group
    if name:
        group.group_name = group.group_desc = name

    def shutdown(_: AccordProcessGroup) -> None:
        global _default
        with _lock:
            if _default is world:
                _default = None
            _worlds_of_subgroups.discard(world)
        world.destroy()

    if is_default:
        with _lock:
            if _default is not None:  # torch re-initialised without destroying: release the old
                _default.destroy()
            _default = world
        install_process_hooks(_destroy_at_exit, current_world, _dump)
    else:
        with _lock:
            _worlds_of_subgroups.add(world)
    return AccordProcessGroup(group, on_shutdown=shutdown)


_worlds_of_subgroups: set[World] = set()


def _subgroup(world: World, ranks: list[int], name: str, seconds: float) -> AccordProcessGroup:
    group = world.make_group(
        _group_id(world, name, ranks), ranks, seconds, BACKEND_NAME, name or f"accord-subgroup-{ranks}", None
    )
    group.object_policy = getattr(world.default_group, "object_policy", None)
    world.attach(group)

    def shutdown(_: AccordProcessGroup) -> None:
        if group in world.groups:
            world.detach(group)

    return AccordProcessGroup(group, on_shutdown=shutdown)


def _group_id(world: World, name: str, ranks: list[int]) -> int:
    """The same on every member: from torch's group name (and the ranks, for unnamed ones)."""
    digest = hashlib.blake2b(f"torch:{name}:{ranks}".encode(), digest_size=4).digest()
    group_id = int.from_bytes(digest, "little") or 1
    if group_id == INIT_BARRIER_GROUP or any(g.group_id == group_id for g in world.all_groups()):
        raise InternalError(f"group id collision for torch group {name!r} (ranks {ranks}); please report it")
    return group_id


def _seconds(timeout: Any) -> float:
    if isinstance(timeout, timedelta) and timeout.total_seconds() > 0:
        return timeout.total_seconds()
    return 1800.0  # torch's default process-group timeout


def _destroy_at_exit() -> None:
    global _default
    with _lock:
        world, _default = _default, None
        others = list(_worlds_of_subgroups)
        _worlds_of_subgroups.clear()
    for each in [*others, *([world] if world is not None else [])]:
        each.destroy()


def _dump(reason: str) -> None:
    world = _default
    if world is not None and world.monitor is not None:
        world.monitor.dump(reason)
