"""Several groups at once: new_subgroups, new_subgroups_by_enumeration, split_group.

Owns: torch's signatures and checks for carving a world (or a group) into disjoint groups.
Every group is an ordinary ``new_group``: each has its own id in every frame header, so
groups used at the same time never see each other's messages. Ranks in signatures are
global, except ``split_group``'s, which are ranks of the parent group (as torch's).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..errors import ArgumentError, ArgumentTypeError
from ..group.process_group import ProcessGroup
from ..world import current_world
from .common import resolve_group
from .lifecycle import new_group


def new_subgroups(
    group_size: int | None = None,
    group: Any = None,
    timeout: timedelta | None = None,
    backend: str | None = None,
    pg_options: Any = None,
    group_desc: str | None = None,
) -> tuple[Any, list[Any]]:
    """Cut ``group`` (default: the world) into consecutive subgroups of ``group_size`` ranks.
    Returns (this rank's subgroup, every subgroup). Every rank of the world calls it.

    ``group_size`` is required: torch's default (the number of CUDA devices) means nothing
    on CPU.
    """
    if group_size is None:
        raise ArgumentError(
            "group_size is required: torch defaults it to the number of CUDA devices, "
            "which does not apply to accord's CPU backend"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ArgumentTypeError(f"group_size must be an int, got {type(group_size).__name__}")
    if group_size <= 0:
        raise ArgumentError(f"The arg 'group_size' ({group_size}) must be positive")
    pg = resolve_group(group, "new_subgroups")
    if pg is None:
        raise ArgumentError("new_subgroups: this rank is not a member of the given group")
    ranks = pg.ranks
    if len(ranks) < group_size:
        raise ArgumentError(
            f"The arg 'group_size' ({group_size}) must not exceed the group size ({len(ranks)})"
        )
    if len(ranks) % group_size:
        raise ArgumentError(f"The group size ({len(ranks)}) must be divisible by group_size={group_size}")
    chunks = [ranks[i : i + group_size] for i in range(0, len(ranks), group_size)]
    return new_subgroups_by_enumeration(chunks, timeout, backend, pg_options, group_desc)


def new_subgroups_by_enumeration(
    ranks_per_subgroup_list: Any,
    timeout: timedelta | None = None,
    backend: str | None = None,
    pg_options: Any = None,
    group_desc: str | None = None,
) -> tuple[Any, list[Any]]:
    """One group per list of global ranks (the lists must not overlap). Returns (this rank's
    subgroup or None, every subgroup: NON_GROUP_MEMBER where this rank is not a member).
    Every rank of the world calls it with the same lists."""
    if not ranks_per_subgroup_list:
        raise ArgumentError("The arg 'ranks_per_subgroup_list' cannot be empty")
    seen: dict[int, list[int]] = {}
    for ranks in ranks_per_subgroup_list:
        for rank in ranks:
            if rank in seen:
                raise ArgumentError(
                    f"Rank {rank} has appeared in both subgroup {seen[rank]} and "
                    f"{list(ranks)}: subgroups must not overlap"
                )
            seen[rank] = list(ranks)
    world = current_world()
    assert world is not None
    mine, subgroups = None, []
    for ranks in ranks_per_subgroup_list:
        subgroup = new_group(
            ranks, timeout=timeout, backend=backend, pg_options=pg_options, group_desc=group_desc
        )
        subgroups.append(subgroup)
        if world.rank in ranks:
            mine = subgroup
    return mine, subgroups


def split_group(
    parent_pg: Any = None,
    split_ranks: Any = None,
    timeout: timedelta | None = None,
    pg_options: Any = None,
    group_desc: str | None = None,
    backend: str | None = None,
) -> ProcessGroup | None:
    """Split ``parent_pg`` (default: the world) into disjoint groups given by lists of
    *parent group ranks*; returns this rank's group, or None if it is in none. Every member
    of the parent calls it with the same lists. (torch allows it for NCCL only; accord's
    groups need no device.)"""
    if not split_ranks:
        raise ArgumentError("split_ranks cannot be None or empty")
    parent = resolve_group(parent_pg, "split_group")
    if parent is None:
        raise ArgumentError("split_group: this rank is not part of the parent group")
    splits = [_check_split(split, parent.size()) for split in split_ranks]
    owner: dict[int, list[int]] = {}
    for split in splits:
        for rank in split:
            if rank in owner:
                raise ArgumentError(
                    f"rank {rank} is in both split {owner[rank]} and {split}: splits must not overlap"
                )
            owner[rank] = split
    mine = owner.get(parent.rank())
    if mine is None:
        return None
    members = [parent.global_rank_of(r) for r in mine]
    group: ProcessGroup | None = new_group(
        members,
        timeout=timeout,
        backend=backend,
        pg_options=pg_options,
        use_local_synchronization=True,
        group_desc=group_desc,
    )
    return group


def _check_split(split: Any, size: int) -> list[int]:
    try:
        ranks = sorted(int(r) for r in split)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"each split must be a list of group ranks, got {split!r}") from None
    if not ranks:
        raise ArgumentError("the split group cannot be empty")
    if len(set(ranks)) != len(ranks):
        raise ArgumentError(f"the split group cannot have duplicate ranks: {list(split)}")
    if ranks[0] < 0 or ranks[-1] >= size:
        raise ArgumentError(f"split {list(split)} has ranks out of range for a parent group of size {size}")
    return ranks
