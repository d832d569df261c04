"""Membership changes of a running job: ``shrink_group`` (torch 2.13's API), ``lost_ranks``,
and the step from one world to the next that growing shares (``move_world``).

Owns: excluding ranks from a group in place, the survivors' side of it. A group whose member
died is broken for good (``PeerError``); the survivors call ``shrink_group(lost_ranks())``
and get a working group of themselves, renumbered, without restarting their processes.
Shrinking the default group makes a new world: a new mesh among the survivors, met under
store keys of its own (``<world prefix>/change<n>-<digest of the survivors>``, so that
survivors that disagree on whom to exclude never meet in one world: they time out, and the
error says who kept whom), with the old world's store handed over (rank 0's server keeps
running), every other group of the old world destroyed, as torch does, and the change in
the new world's membership history (flight-recorder dumps, stuck reports). The old world's
GOODBYE says this rank moves on, so a slower survivor does not count it lost. Shrinking
another group makes a new group of its survivors on the same mesh (only they call it, as
with ``new_group(use_local_synchronization=True)``); global ranks stay.

Must not know about torch (``integrations.torch.membership`` does the same through torch's
API) or the launcher.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import DistTimeoutError, StoreTimeoutError
from ..group.process_group import ProcessGroup
from ..timeouts import to_seconds
from ..world import NON_GROUP_MEMBER, World, current_world, replace_world
from .adoption import add_device_groups
from .worlds import build_world

#: shrink_group's flags (torch's values): wait for nothing, refuse a group with calls in
#: flight / fail the calls in flight, then shrink
SHRINK_DEFAULT = 0x00
SHRINK_ABORT = 0x01


def shrink_group(
    ranks_to_exclude: list[int],
    group: Any = None,
    shrink_flags: int = SHRINK_DEFAULT,
    pg_options: Any = None,
) -> ProcessGroup:
    """A new group of ``group``'s ranks less ``ranks_to_exclude`` (ranks in ``group``),
    made by those that remain — each of them calls this, an excluded rank must not. With
    ``group`` None (the default group) the survivors become the new world, renumbered
    0..n-1 in their old order, and every other group is destroyed (their ranks no longer
    mean what they did); otherwise the new group takes the old one's place and global ranks
    stay. The old group is destroyed either way.

    ``shrink_flags``: ``SHRINK_DEFAULT`` refuses a group with a call still in flight (an
    async call not waited for, a call in another thread); ``SHRINK_ABORT`` fails such calls
    first. ``pg_options`` is accepted for torch's signature; accord's groups take none.

    Raises:
        TypeError: ``ranks_to_exclude`` is not a list of ints, or the group's engine cannot
            shrink (backend mpi: MPI cannot leave a process out without ULFM).
        ValueError: empty, out of range or repeated ranks, every rank excluded, a group of
            one rank, an unknown flag.
        RuntimeError: this rank is among the excluded, or a call is in flight (SHRINK_DEFAULT).
        DistTimeoutError: not every survivor called shrink_group with the same ranks in
            time (the message says who asked for what).
    """
    check_arguments(ranks_to_exclude, shrink_flags)
    world = current_world()
    assert world is not None
    pg = _target(world, group)
    if world.mesh is None or not isinstance(world.default_group, ProcessGroup):
        raise TypeError(
            f"shrink_group: the groups of this world run on backend {world.backend!r}, which "
            f"cannot shrink" + (_MPI_WHY if world.mesh is None else "")
        )
    survivors = survivors_of(pg, ranks_to_exclude, shrink_flags)
    if pg is world.default_group:
        return _shrink_world(world, survivors)
    return _shrink_subgroup(world, pg, survivors)


def survivors_of(pg: ProcessGroup, ranks_to_exclude: list[int], shrink_flags: int) -> list[int]:
    """The global ranks that remain of ``pg`` (torch's checks of the excluded ranks, with its
    errors), once no call of ``pg`` is in flight: ``SHRINK_DEFAULT`` refuses a group with
    calls in flight, ``SHRINK_ABORT`` fails them."""
    if pg.size() <= 1:
        raise ValueError(
            f"Cannot shrink a process group with size {pg.size()}. Group must have at least 2 "
            f"ranks to support shrinking."
        )
    excluded = _check_excluded(ranks_to_exclude, pg)
    # a broken group's calls can only fail (they do when it is destroyed), and a call it
    # refused took a number it never ends: only a working group can have calls in flight
    if not pg.is_broken() and pg.calls.in_flight():
        if shrink_flags != SHRINK_ABORT:
            raise RuntimeError(
                f"{pg.calls.context('shrink_group')}: group {pg.group_name!r} has calls in flight "
                f"(queued or running; the last started is #{pg.calls.last_seq}): wait for them, "
                f"or pass shrink_flags=SHRINK_ABORT to fail them first"
            )
        pg.abort(f"shrink_group(SHRINK_ABORT) on {pg.calls.where}")
    return [r for i, r in enumerate(pg.ranks) if i not in excluded]


def meeting(world: World, survivors: list[int]) -> tuple[str, str]:
    """(base, prefix): the store keys under which ``survivors`` of ``world``'s default
    group meet as a new world: ``prefix`` names them (survivors that disagree never meet),
    ``base`` is where each says whom it kept (``explain``)."""
    base = f"{world.store_prefix}/change{world.changes + 1}"
    digest = hashlib.blake2b(json.dumps(survivors).encode(), digest_size=6).hexdigest()
    return base, f"{base}-{digest}"


def lost_ranks(group: Any = None) -> list[int]:
    """The ranks of ``group`` (group ranks; None: the default group) that this rank has
    seen go: died (a closed connection, no goodbye) or left (destroyed their group). What
    the survivors pass to ``shrink_group`` after a ``PeerError`` — not the error's ``peer``,
    which on a rank told of the failure by another survivor is that survivor. Every
    survivor sees a dead rank's connection close within milliseconds of each other, so
    they agree; a rank that left cleanly is here as well."""
    world = current_world()
    assert world is not None
    return lost_in(world, _target(world, group))


def lost_in(world: World, pg: ProcessGroup) -> list[int]:
    """``lost_ranks`` of ``pg``, a group of ``world``. A broken group whose lost rank this
    rank has not seen go yet (another survivor told it of the failure first) gets up to
    ``_SETTLE_S`` for the dead rank's closed connection to be read."""
    if world.mesh is None:
        return []
    mesh, ranks = world.mesh, pg.ranks
    if pg.is_broken():
        mesh.drive_until(lambda: bool(mesh.gone(ranks)), _SETTLE_S)
    return [pg.group_ranks[r] for r in mesh.gone(ranks)]


_SETTLE_S = 2.0


_MPI_WHY = (
    ": an MPI communicator cannot leave a failed process out without ULFM's MPIX_Comm_shrink, "
    "which MPICH and mpi4py do not offer in their standard builds (and mpiexec ends the job "
    "when a rank dies); use accord's own backend for jobs that must survive a lost rank"
)


def check_arguments(ranks_to_exclude: Any, shrink_flags: Any) -> None:
    """torch's checks of the arguments alone, with its errors."""
    if not isinstance(ranks_to_exclude, list):
        raise TypeError(
            f"ranks_to_exclude must be a list, but got {type(ranks_to_exclude).__name__}. "
            f"Example: [1, 3, 5] to exclude ranks 1, 3, and 5."
        )
    if not ranks_to_exclude:
        raise ValueError(
            "ranks_to_exclude cannot be empty. To shrink a group, you must specify at least "
            "one rank to exclude. Example: [failed_rank_id]"
        )
    if isinstance(shrink_flags, bool) or shrink_flags not in (SHRINK_DEFAULT, SHRINK_ABORT):
        raise ValueError(
            f"Invalid shrink_flags value: {shrink_flags}. Must be one of: SHRINK_DEFAULT "
            f"({SHRINK_DEFAULT}) or SHRINK_ABORT ({SHRINK_ABORT}). Use SHRINK_ABORT to abort "
            f"ongoing operations before shrinking."
        )


def _target(world: World, group: Any) -> ProcessGroup:
    if group is None or group is world.default_group:
        pg = world.default_group
    elif isinstance(group, int) and group == NON_GROUP_MEMBER:
        raise RuntimeError("shrink_group: this rank is not a member of the group (NON_GROUP_MEMBER)")
    elif isinstance(group, ProcessGroup) and group in world.groups:
        pg = group
    else:
        raise ValueError(f"shrink_group: {group!r} is not a live group of the current world")
    return pg  # type: ignore[no-any-return]


def _check_excluded(ranks_to_exclude: list[Any], pg: ProcessGroup) -> set[int]:
    """The excluded group ranks, checked as torch checks them (its errors)."""
    size, excluded = pg.size(), set()
    for i, rank in enumerate(ranks_to_exclude):
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(
                f"All elements in ranks_to_exclude must be integers. Element at index {i} is "
                f"{type(rank).__name__}: {rank}"
            )
        if not 0 <= rank < size:
            raise ValueError(
                f"Rank {rank} at index {i} is out of bounds for group size {size}. Valid ranks "
                f"are in range [0, {size - 1}]."
            )
        if rank in excluded:
            raise ValueError(
                f"Duplicate rank {rank} found in ranks_to_exclude at index {i}. Each rank can "
                f"only be excluded once."
            )
        excluded.add(rank)
    if len(excluded) >= size:
        raise ValueError(
            f"Cannot exclude all {size} ranks from process group. At least one rank must "
            f"remain. Excluding {len(excluded)} ranks."
        )
    if pg.rank() in excluded:
        raise RuntimeError(
            f"Current rank {pg.rank()} is in the exclusion list and should not call "
            f"shrink_group(). Only non-excluded ranks should participate in the shrinking "
            f"operation. Excluded ranks should terminate their processes instead."
        )
    return excluded


def _shrink_world(world: World, survivors: list[int]) -> ProcessGroup:
    """The survivors' new world (see the module docstring); its default group."""
    store = world.store
    assert store is not None  # (a mesh world always has its store)
    base, prefix = meeting(world, survivors)
    others = [g.group_name for g in world.groups]
    if others:
        warnings.warn(
            f"Shrinking default group will destroy {len(others)} other process groups: "
            f"{', '.join(others)}. This is necessary because shrinking the default group "
            f"reassigns global ranks, making existing groups inconsistent.",
            stacklevel=3,
        )
    say_kept(store, base, world.rank, survivors)
    excluded = [r for r in range(world.size) if r not in survivors]
    return move_world(
        world,
        survivors.index(world.rank),
        len(survivors),
        prefix,
        "default:shrunken",
        lambda: explain(store, base, survivors),
        {"what": "shrink_group", "excluded": excluded},
    )


def move_world(
    world: World,
    rank: int,
    size: int,
    prefix: str,
    desc: str,
    why_late: Callable[[], str],
    what: dict[str, Any],
) -> ProcessGroup:
    """Destroy ``world`` (keeping its store open) and make its successor: ``rank`` of
    ``size``, meeting under ``prefix``; the new default group (``desc``) replaces the old
    one where it was current, and the change (``what``: its name and what it did) joins
    the new world's membership history (``change``). A timeout of the meeting gets
    ``why_late()`` added to its message; after any failure this rank has no world
    (init_process_group may be called)."""
    store, old = world.store, world.default_group
    assert store is not None
    owns_store = world.hand_over_store()
    world.destroy(moving=True)  # (current until the new one is made: calls on it say so)
    try:
        seconds = to_seconds(old.timeout)
        new = build_world(store, rank, size, world.backend, seconds, owns_store, prefix=prefix)
    except BaseException as exc:
        replace_world(world, None)
        why = why_late() if isinstance(exc, DistTimeoutError) else ""
        if owns_store:
            store.close()
        if why:
            raise DistTimeoutError(f"{exc}{why}") from exc
        raise
    new.changes = world.changes + 1
    new.store_prefix = prefix
    record_change(new, world.membership, what, (world.size, size), (world.rank, rank))
    default = new.default_group
    default.group_desc = desc
    default.object_policy = old.object_policy
    try:
        add_device_groups(new, default, world.device_backends)
    except BaseException:
        replace_world(world, None)
        new.destroy()
        raise
    new.device_backends = world.device_backends
    replace_world(world, new)
    return default  # type: ignore[no-any-return]


def record_change(
    new: World,
    history: list[dict[str, Any]],
    what: dict[str, Any],
    sizes: tuple[int, int],
    ranks: tuple[int | None, int],
) -> None:
    """``new``'s membership history: ``history`` and the change that made ``new`` (its
    number is ``new.changes``), which its monitor shows in dumps and stuck reports."""
    entry = {"change": new.changes, "time": time.time(), "size": list(sizes), "rank": list(ranks), **what}
    new.membership = [*history, entry]
    if new.monitor is not None:
        new.monitor.membership = new.membership


def say_kept(store: Any, base: str, rank: int, survivors: list[int]) -> None:
    """Post whom this rank (a rank of the old world) kept, for ``explain``."""
    store.set(f"{base}/asked/{rank}", json.dumps(survivors))


def explain(store: Any, base: str, survivors: list[int]) -> str:
    """What the other survivors asked for, when they did not all ask for ``survivors``
    (to add to the timeout of a meeting that did not happen; "" when nothing is known)."""
    said = []
    for rank in survivors:
        try:
            if store.check([f"{base}/asked/{rank}"]):
                asked = json.loads(store.get(f"{base}/asked/{rank}"))
                if asked != survivors:
                    said.append(f"rank {rank} kept ranks {asked}")
            else:
                said.append(f"rank {rank} did not call shrink_group")
        except (StoreTimeoutError, OSError, ValueError):
            return ""
    return f" (this rank kept ranks {survivors}; {'; '.join(said)})" if said else ""


def _shrink_subgroup(world: World, pg: ProcessGroup, survivors: list[int]) -> ProcessGroup:
    """A new group of ``survivors`` on the world's mesh, in ``pg``'s place."""
    group_id, n = world.next_group_id(survivors)
    name, desc = f"pg{n}:{group_id:08x}", f"{pg.group_desc}:shrunk"
    new = world.make_group(group_id, survivors, to_seconds(pg.timeout), pg.backend, name, desc)
    new.object_policy = pg.object_policy
    try:
        add_device_groups(world, new, world.device_backends if pg.device_groups else {})
    except BaseException:
        new.shutdown()
        raise
    world.detach(pg)
    world.attach(new)
    return new
