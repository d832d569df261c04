"""What every functional API call does first: find its group, translate its ranks, and find
the device group that carries its tensor.

Owns: resolving ``group=`` (None → the default group; NON_GROUP_MEMBER → "not a member"),
turning torch's ``src``/``group_src`` (or ``dst``/``group_dst``) pairs into a group rank
(and refusing a peer that is the rank itself), and finding the device group that claims a
tensor. Asks the world and the group through their public names only.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import ArgumentError, ArgumentTypeError
from ..group.process_group import ProcessGroup
from ..world import NON_GROUP_MEMBER, current_world


def resolve_group(group: Any, op: str, stacklevel: int = 3) -> ProcessGroup | None:
    """The group a call runs on, or None when this rank is not a member (torch then warns,
    at the user's line ``stacklevel`` frames up, and the call returns None)."""
    world = current_world()  # (raises: not initialized)
    assert world is not None
    if group is None or group is world.default_group:
        default: ProcessGroup | None = world.default_group
        return default
    if isinstance(group, int) and not isinstance(group, bool) and group == NON_GROUP_MEMBER:
        warnings.warn(
            f"Running {op} on global rank {world.rank} which does not belong to the given group.",
            stacklevel=stacklevel,
        )
        return None
    if isinstance(group, ProcessGroup):
        return group
    raise ArgumentTypeError(
        f"group must be a ProcessGroup from init_process_group/new_group, "
        f"or None for the default group; got {type(group).__name__}"
    )


def group_rank(group: ProcessGroup, global_rank: int | None, local_rank: int | None, what: str) -> int:
    """The group rank named either by a global rank (``src``) or a group rank (``group_src``),
    checked (the pipeline's ``Rank`` takes a member's global rank the short way first)."""
    if local_rank is not None:
        if global_rank is not None:
            raise ArgumentError(f"pass either {what} or group_{what}, not both")
        if isinstance(local_rank, bool) or not isinstance(local_rank, int):
            raise ArgumentTypeError(f"group_{what} must be an int, got {type(local_rank).__name__}")
        if not 0 <= local_rank < group.size():
            raise ArgumentError(
                f"group_{what}={local_rank} is out of range for a group of size {group.size()}"
            )
        return local_rank
    if global_rank is None:
        raise ArgumentError(f"{what} is required (a global rank), or group_{what} (a rank in the group)")
    if isinstance(global_rank, bool) or not isinstance(global_rank, int):
        raise ArgumentTypeError(f"{what} must be an int rank, got {type(global_rank).__name__}")
    world = current_world()
    assert world is not None
    if not 0 <= global_rank < world.size:
        raise ArgumentError(f"{what}={global_rank} is out of range for a world of size {world.size}")
    return group.group_rank_of(global_rank)


def check_not_self(group: ProcessGroup, rank: int, what: str) -> None:
    """Refuse a peer that is this rank itself (a group rank)."""
    if rank == group.rank():
        raise ArgumentError(
            f"{what} is this rank itself (group rank {rank}); a rank cannot send to or receive from itself"
        )


def device_group(group: ProcessGroup, tensor: Any) -> Any:
    """The device group (torch's NCCL, for a CUDA tensor) that carries a call on ``tensor``
    (a list: its first element), or None: accord's own backend. Callers test
    ``group.device_groups`` first, so CPU-only worlds pay one attribute read."""
    if isinstance(tensor, (list, tuple)):
        if not tensor:
            return None
        tensor = tensor[0]
    for candidate in group.device_groups.values():
        if candidate.claims(tensor):
            return candidate
    return None
