"""``shrink_group`` for torch programs on backend accord: the survivors' new torch group.

Owns: ``shrink_group``, torch 2.13's function with torch's arguments and errors, for torch
groups of backend accord. ``torch.distributed.shrink_group`` itself cannot reach a Python
backend: it asks the group's C++ ``Backend`` (``_get_backend``) to shrink and registers the
``Backend`` it returns in a new C++ ProcessGroup — and torch offers no way to make a
``Backend`` in Python (its constructor is not exposed), so a Python process group such as
accord's has none to give (torch then says "Cannot access device backend"). This function
does what torch's does, through torch's public API: for the default group, the survivors
destroy the old groups (``destroy_process_group``: accord's world behind them goes too, with
no call to the lost rank) and make the new default group with ``init_process_group`` on the
same store, under keys of their own (``api.membership.meeting``), renumbered; for another
group, ``new_group(survivors, use_local_synchronization=True)`` and the old one destroyed.
Must not know about the launcher.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

from ...api import admission, membership
from ...errors import DistTimeoutError
from ...timeouts import DEFAULT_PG_TIMEOUT, to_seconds
from .backend import BACKEND_NAME, AccordProcessGroup
from .context import current_world, moving
from .store import TorchStore

SHRINK_DEFAULT, SHRINK_ABORT = membership.SHRINK_DEFAULT, membership.SHRINK_ABORT


def shrink_group(
    ranks_to_exclude: list[int],
    group: Any = None,
    shrink_flags: int = SHRINK_DEFAULT,
    pg_options: Any = None,
) -> dist.ProcessGroup:
    """``torch.distributed.shrink_group`` for groups of backend accord (same arguments,
    errors and result: a torch ProcessGroup of the ranks that remain, the new default group
    when ``group`` is None or the default group). Every remaining rank calls it; see
    ``accord.shrink_group`` for what the flags mean."""
    membership.check_arguments(ranks_to_exclude, shrink_flags)
    pg = dist.group.WORLD if group is None else group
    if not isinstance(pg, AccordProcessGroup):
        raise TypeError(
            f"accord's shrink_group shrinks torch groups of backend {BACKEND_NAME!r}; this "
            f"one is {type(pg).__name__} (backend {dist.get_backend(pg)!r}): use "
            f"torch.distributed.shrink_group for it"
        )
    survivors = membership.survivors_of(pg.accord_group, ranks_to_exclude, shrink_flags)
    timeout = timedelta(seconds=pg.accord_group.calls.timeout)
    if pg == dist.group.WORLD:
        return _shrink_world(survivors, timeout)
    new: dist.ProcessGroup = dist.new_group(survivors, timeout=timeout, use_local_synchronization=True)
    dist.destroy_process_group(pg)
    return new


def _shrink_world(survivors: list[int], timeout: timedelta) -> dist.ProcessGroup:
    world = current_world()
    if world is None or not isinstance(world.store, TorchStore):
        raise RuntimeError("shrink_group: torch's default group is not accord's (no accord world behind it)")
    store, rank = world.store, world.rank
    base, prefix = membership.meeting(world, survivors)
    membership.say_kept(store, base, rank, survivors)
    world.will_move()  # (its goodbye says this rank goes on: the others do not count it lost)
    dist.destroy_process_group()  # every group of the old world, accord's world with them
    try:
        with moving():
            dist.init_process_group(
                BACKEND_NAME,
                store=dist.PrefixStore(f"{prefix}/", store.torch_store),
                rank=survivors.index(rank),
                world_size=len(survivors),
                timeout=timeout,
            )
    except DistTimeoutError as exc:
        why = membership.explain(store, base, survivors)
        if why:
            raise DistTimeoutError(f"shrink_group: {exc}{why}") from exc
        raise
    new = current_world()
    assert new is not None
    new.changes = world.changes + 1
    new.default_group.group_desc = "default:shrunken"
    excluded = {"what": "shrink_group", "excluded": [r for r in range(world.size) if r not in survivors]}
    sizes, ranks = (world.size, len(survivors)), (rank, survivors.index(rank))
    membership.record_change(new, world.membership, excluded, sizes, ranks)
    return dist.group.WORLD  # type: ignore[return-value]


def lost_ranks(group: Any = None) -> list[int]:
    """``accord.lost_ranks`` for a torch group of backend accord: its ranks this rank has
    seen go (what the survivors pass to ``shrink_group``)."""
    pg = dist.group.WORLD if group is None else group
    world = current_world()
    if not isinstance(pg, AccordProcessGroup) or world is None:
        raise TypeError(f"lost_ranks: {pg!r} is not a torch group of backend {BACKEND_NAME!r}")
    return membership.lost_in(world, pg.accord_group)


def grow_group(world_size: int, timeout: timedelta | None = None) -> dist.ProcessGroup:
    """``accord.grow_group`` for torch's default group on backend accord: take newcomers
    (``join_process_group`` here, or accord's) until the job has ``world_size`` ranks; every
    rank of the job calls it. Returns the new default group (torch's other groups are
    destroyed: make them again)."""
    world = current_world()
    if world is None or not isinstance(world.store, TorchStore):
        raise RuntimeError("grow_group: torch's default group is not accord's (no accord world behind it)")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= world.size:
        raise ValueError(
            f"grow_group: world_size must be an int above the world's {world.size}: {world_size!r}"
        )
    seconds = to_seconds(timeout, default=world.default_group.calls.timeout)
    root = _root(world.store.torch_store)
    decision = admission.decide(world, world_size, seconds, TorchStore(root))
    world.will_move()
    dist.destroy_process_group()
    _init_on(root, decision, world.rank, seconds, "grow_group", world.rank)
    return dist.group.WORLD  # type: ignore[return-value]


def join_process_group(
    init_method: str | None = None, timeout: timedelta | None = None, store: Any = None
) -> None:
    """``accord.join_process_group`` for a torch program: join a running job on backend
    accord as a new rank (torch's default group is then the job's, this process's rank the
    one the job gave it). ``store``: a torch Store of the job's (default: a TCPStore client
    of ``init_method``, env:// or tcp://host:port)."""
    if dist.is_initialized():
        raise ValueError("join_process_group: this process is already in a job (init_process_group)")
    seconds = to_seconds(timeout, default=DEFAULT_PG_TIMEOUT)
    root = _root(store) if store is not None else _client(init_method or "env://", seconds)
    decision = admission.ask(TorchStore(root), seconds)
    _init_on(root, decision, decision["rank"], seconds, "join_process_group", None)


def _init_on(
    root: Any, decision: dict[str, Any], rank: int, seconds: float, what: str, old_rank: int | None
) -> None:
    """torch's default group on backend accord for ``decision`` (admission.decide's), the
    change (``what``) recorded in its membership history."""
    with moving():
        dist.init_process_group(
            BACKEND_NAME,
            store=dist.PrefixStore(f"{decision['prefix']}/", root),
            rank=rank,
            world_size=decision["size"],
            timeout=timedelta(seconds=seconds),
        )
    new = current_world()
    assert new is not None
    new.changes = decision["changes"]
    new.default_group.group_desc = "default:grown"
    sizes = (decision["size"] - decision["admitted"], decision["size"])
    change = {"what": what, "admitted": decision["admitted"]}
    membership.record_change(new, decision["history"], change, sizes, (old_rank, rank))


def _root(store: Any) -> Any:
    """The job's store under torch's prefixes (where newcomers ask: they know only it)."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def _client(init_method: str, seconds: float) -> Any:
    """A torch TCPStore client of the job's store named by ``init_method``."""
    from urllib.parse import urlparse

    from ... import config

    parsed = urlparse(init_method)
    if parsed.scheme == "env":
        host, port = config.MASTER_ADDR.raw(), config.env_int(config.MASTER_PORT)
    elif parsed.scheme == "tcp":
        host, port = parsed.hostname, parsed.port
    else:
        host = port = None
    if not host or port is None:
        raise ValueError(
            f"join_process_group: {init_method!r} names no TCPStore (env:// with MASTER_ADDR "
            f"and MASTER_PORT, or tcp://host:port)"
        )
    return dist.TCPStore(
        host, port, is_master=False, timeout=timedelta(seconds=seconds), wait_for_workers=False
    )
