"""monitored_barrier: a barrier that names the ranks that did not arrive.

Owns: the schedule (every rank sends an arrival message to group rank 0; rank 0 collects
them within the timeout, then releases everyone) and the failure: rank 0 raises naming the
first missing rank, or every missing rank with ``wait_all_ranks=True``, in one message
(torch's "Ranks 1, 2, 3 failed to pass monitoredBarrier"). A rank is missing if it did not
arrive in time (DistTimeoutError) or left the group first: it exited or called
destroy_process_group, which the transport reports as a finished receive with a PeerError
(``settle``, unlike ``wait``, lets rank 0 collect those instead of raising at the first).
When every missing rank left, rank 0 raises PeerError at once instead of waiting out the
timeout. Because a failed call breaks the group and tells its members (POISON), the ranks
that did arrive fail at once with the same explanation instead of waiting out their own
timeout (they allow twice the timeout, so that rank 0 speaks first, and they wait for rank
0 only: another rank's departure is rank 0's to report). Must not know about the default
world or env variables.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collectives.algorithm import COLLECTIVES
from ..errors import DistTimeoutError, PeerError
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
            _arrive(peers, 2 * seconds)
            return
        arrivals = {r: peers.irecv(r, np.empty(0, dtype=np.uint8), _ARRIVE) for r in range(1, peers.size)}
        absent, departed = _missing(peers, arrivals, wait_all_ranks)
        if absent or departed:
            raise _failure(group, peers, absent, departed, seconds, wait_all_ranks)
        peers.wait(*[peers.isend(r, empty, _RELEASE) for r in arrivals])

    # The others wait twice as long for the release, so that rank 0, which knows who is
    # missing, is the one that reports (a rank that timed out first would blame rank 0).
    group.engine.run_collective(
        "monitored_barrier", fp, body, [], [], False, seconds if group.rank() == 0 else 2 * seconds
    )


def _arrive(peers: Any, seconds: float) -> None:
    """A rank other than 0: tell rank 0, then wait for its release (or its report)."""
    release = peers.irecv(0, np.empty(0, dtype=np.uint8), _RELEASE)
    arrive = peers.isend(0, np.empty(0, dtype=np.uint8), _ARRIVE)
    peers.settle(arrive, release)
    for handle in (arrive, release):
        if handle.error is not None:
            raise handle.error
    if not release.done:
        raise DistTimeoutError(
            f"{peers}: nothing from rank 0 in {format_seconds(seconds)}: it did not "
            f"release this rank from monitored_barrier. Is rank 0 alive, and did "
            f"it call monitored_barrier too?"
        )


def _missing(peers: Any, arrivals: dict[int, Any], wait_all_ranks: bool) -> tuple[list[int], list[int]]:
    """(absent, departed): the group ranks that did not arrive before the deadline, and those
    that left the group instead. All of them, or the first one in rank order."""
    absent: list[int] = []
    departed: list[int] = []
    if wait_all_ranks:
        peers.settle(*arrivals.values())
    for rank, handle in arrivals.items():
        if not wait_all_ranks:
            peers.settle(handle)
        if handle.error is not None:
            if not isinstance(handle.error, PeerError) or handle.error.peer is None:
                raise handle.error  # not a departure: a mismatch, say
            departed.append(rank)
        elif not handle.done:
            absent.append(rank)
        if (absent or departed) and not wait_all_ranks:
            break
    return absent, departed


def _failure(
    group: ProcessGroup, peers: Any, absent: list[int], departed: list[int], seconds: float, every: bool
) -> BaseException:
    """One error naming every missing rank: DistTimeoutError if any of them is merely absent,
    PeerError if all of them left."""

    def names(ranks: list[int]) -> str:
        word = "rank" if len(ranks) == 1 else "ranks"
        listed = ", ".join(str(group.global_rank_of(r)) for r in ranks)
        if group.group_id:
            listed += f" (group {word} {', '.join(map(str, ranks))})"
        return f"{word} {listed}"

    missing = sorted(absent + departed)
    why = []
    if departed:
        verb = "has" if len(departed) == 1 else "have"
        why.append(
            f"{names(departed)} {verb} left the group (exited or called destroy_process_group) "
            f"without calling it"
        )
    if absent:
        why.append(f"{names(absent)} did not call it in time")
    first = "" if every else " (the first one missing; wait_all_ranks=True lists them all)"
    message = (
        f"{peers}: {names(missing)} failed to pass monitored_barrier in "
        f"{format_seconds(seconds)}{first}: {'; '.join(why)}. Did every rank call the same "
        f"collectives in the same order? The other ranks of the group fail now too"
    )
    if absent:
        return DistTimeoutError(message)
    return PeerError(message, peer=group.global_rank_of(departed[0]))
