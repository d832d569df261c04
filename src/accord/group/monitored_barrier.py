"""monitored_barrier: a barrier that names the ranks that did not arrive.

Owns: the schedule (every rank sends an arrival message to group rank 0; rank 0 collects
them within the timeout, then releases everyone) and the failure: rank 0 raises
DistTimeoutError naming the first missing rank, or every missing rank with
``wait_all_ranks=True``. Because a failed call breaks the group and tells its members
(POISON), the ranks that did arrive fail at once with the same explanation instead of
waiting out their own timeout (they allow twice the timeout, so that rank 0 speaks first;
if rank 0 itself never comes, they report it after that). Must not know about the default
world or env variables.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collectives.algorithm import COLLECTIVES
from ..errors import DistTimeoutError
from ..timeouts import format_seconds
from ..transport.wire import Fingerprint
from .process_group import ProcessGroup

_ARRIVE, _RELEASE = 0, 1


def monitored_barrier(group: ProcessGroup, timeout: float | None, wait_all_ranks: bool) -> None:
    """Block until every rank of ``group`` arrived (``timeout`` seconds, else the group's)."""
    seconds = group.timeout.total_seconds() if timeout is None else timeout
    fp = Fingerprint(COLLECTIVES["monitored_barrier"], 1 if wait_all_ranks else 0, 0, 0, 0)

    def body(peers: Any) -> None:
        empty = np.empty(0, dtype=np.uint8)
        if peers.rank != 0:
            release = peers.irecv(0, np.empty(0, dtype=np.uint8), _RELEASE)
            peers.wait(peers.isend(0, empty, _ARRIVE), release)
            return
        arrivals = {r: peers.irecv(r, np.empty(0, dtype=np.uint8), _ARRIVE)
                    for r in range(1, peers.size)}
        missing = _missing(peers, arrivals, wait_all_ranks)
        if missing:
            raise DistTimeoutError(_report(group, peers, missing, seconds, wait_all_ranks))
        peers.wait(*[peers.isend(r, empty, _RELEASE) for r in arrivals])

    # The others wait twice as long for the release, so that rank 0, which knows who is
    # missing, is the one that reports (a rank that timed out first would blame rank 0).
    group.run_collective("monitored_barrier", fp, body, [], [], False,
                         seconds if group.rank() == 0 else 2 * seconds)


def _missing(peers: Any, arrivals: dict[int, Any], wait_all_ranks: bool) -> list[int]:
    """The group ranks whose arrival did not come before the call's deadline: the first one
    in rank order, or all of them."""
    if wait_all_ranks:
        try:
            peers.wait(*arrivals.values())
        except DistTimeoutError:
            return [r for r, handle in arrivals.items() if not handle.done]
        return []
    for rank, handle in arrivals.items():
        try:
            peers.wait(handle)
        except DistTimeoutError:
            return [rank]
    return []


def _report(group: ProcessGroup, peers: Any, missing: list[int], seconds: float, every: bool) -> str:
    names = ", ".join(f"rank {group.global_rank_of(r)}"
                      + (f" (group rank {r})" if group.group_id else "") for r in missing)
    first = "" if every else " (the first one missing; wait_all_ranks=True lists them all)"
    return (f"{peers}: {names} failed to pass monitored_barrier in {format_seconds(seconds)}"
            f"{first}. Is it alive, and did every rank call the same collectives in the same "
            f"order? The other ranks of the group fail now too")
