"""torch's look-ups of groups that libraries call (private in torch, exported by accord under
torch's names: ``_get_default_group``, ``_rank_not_in_group``, ``_get_process_group_name``),
and ``breakpoint``: stop one rank in the debugger while the others wait for it.

Owns: what each returns, as torch 2.13's: the default group (ValueError before init);
whether a group handle is the non-member one (None: no, as torch); a group's name ("0" for
the default group, "None" for a handle the world does not know). ``breakpoint`` counts its
skips on the world (torch keeps one process-wide count; accord's is per calling line), sets
every group's timeout to ``timeout_s`` so that waiting ranks do not time out, opens the
debugger on ``rank`` (reading the terminal, as torch's, for a process whose stdin is not
it), then runs a barrier. Must not know how a call runs.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

from ..world import NON_GROUP_MEMBER, current_world
from .collectives import barrier


def default_group() -> Any:
    """The default group (torch's ``_get_default_group``)."""
    world = current_world()  # (NotInitializedError, a ValueError, before init: torch's message)
    assert world is not None
    return world.default_group


def rank_not_in_group(group: Any) -> bool:
    """Whether ``group`` is the handle a non-member got from new_group (torch's
    ``_rank_not_in_group``; None, the default group, is not)."""
    if group is None or not isinstance(group, int) or isinstance(group, bool):
        return False
    return bool(group == NON_GROUP_MEMBER)


def process_group_name(group: Any) -> str:
    """A group's name (torch's ``_get_process_group_name``): "0" for the default group,
    "None" for what is not one of this world's groups."""
    world = current_world(required=False)
    if world is None or not any(group is g for g in [world.default_group, *world.groups]):
        return "None"
    return str(group.group_name)


def make_pdb() -> Any:
    """The debugger ``breakpoint`` opens: pdb reading the terminal (torch's distributed pdb:
    a rank started by a launcher may have no stdin of its own)."""
    import pdb  # noqa: T100 — the debugger is what breakpoint is for

    class DistributedPdb(pdb.Pdb):
        def interaction(self, *args: Any, **kwargs: Any) -> None:
            stdin = sys.stdin
            try:
                with open("/dev/stdin") as sys.stdin:
                    pdb.Pdb.interaction(self, *args, **kwargs)
            finally:
                sys.stdin = stdin

    return DistributedPdb()


def breakpoint(rank: int = 0, skip: int = 0, timeout_s: float | None = 3600) -> None:  # noqa: A001 — torch's name
    """Break into the debugger on ``rank`` only; every other rank waits for it (a barrier).

    Args:
        rank: the rank that breaks. skip: let the first ``skip`` calls from this line pass.
        timeout_s: every group's timeout from now on (None: unchanged), so that the ranks
            waiting at the barrier do not time out during the session.
    """
    world = current_world()
    assert world is not None
    if skip > 0:
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        counts = world.breakpoint_counts
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= skip:
            return
    if timeout_s is not None:
        for group in world.all_groups():
            group.set_timeout(timedelta(seconds=timeout_s))
    if world.rank == rank:
        debugger = make_pdb()
        debugger.message(
            f"\n!!! ATTENTION !!!\n\nType 'up' to get to the frame that called dist.breakpoint(rank={rank})\n"
        )
        debugger.set_trace(sys._getframe(1))
    barrier()
