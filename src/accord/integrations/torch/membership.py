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

from ...api import membership
from ...errors import DistTimeoutError
from .backend import BACKEND_NAME, AccordProcessGroup
from .context import current_world
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
    dist.destroy_process_group()  # every group of the old world, accord's world with them
    try:
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
    return dist.group.WORLD  # type: ignore[return-value]
