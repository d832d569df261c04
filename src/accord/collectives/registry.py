"""Named algorithms with their cost, collective codes, and the rule that picks one by size.

Owns: ``Algorithm`` entries (name, run, one-line cost), ``COLLECTIVES`` (the codes carried in
message fingerprints), and ``choose``: ACCORD_ALGORITHM overrides first, then the size rule.
Every registered algorithm is exercised by the test matrix, not only the defaults. Must not
know about transports or groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import Tunables
from . import allreduce, barrier, broadcast, shm

MESSAGES, SHARED_MEMORY = "messages", "shm"


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    code: int  # carried in the fingerprint, so ranks that chose differently get an error
    run: Callable[..., None]
    cost: str
    kind: str = MESSAGES  # runs over Peers (messages) or over Slots (shared memory)


#: Collective names and their fingerprint codes (never renumber: peers compare them).
COLLECTIVES: dict[str, int] = {
    "barrier": 1, "broadcast": 2, "all_reduce": 3, "reduce": 4, "all_gather": 5, "gather": 6,
    "scatter": 7, "reduce_scatter": 8, "all_to_all": 9, "monitored_barrier": 10, "shm_setup": 11,
}
COLLECTIVE_NAMES: dict[int, str] = {code: name for name, code in COLLECTIVES.items()}

_ENTRIES = [
    Algorithm("all_reduce", "recursive_doubling", 1, allreduce.recursive_doubling,
              "(⌈log2 p⌉+2)·(α + Sβ): latency-optimal, for small S"),
    Algorithm("all_reduce", "ring", 2, allreduce.ring,
              "2(p-1)·α + 2(p-1)/p·Sβ: bandwidth-optimal, segmented, for large S"),
    Algorithm("broadcast", "binomial", 1, broadcast.binomial,
              "⌈log2 p⌉·(α + Sβ): for small S"),
    Algorithm("broadcast", "pipeline", 2, broadcast.pipeline,
              "(p-2+k)·(α + Sβ/k) with k segments ≈ Sβ: for large S"),
    Algorithm("barrier", "dissemination", 1, barrier.dissemination, "⌈log2 p⌉·α"),
    Algorithm("all_reduce", "shm_one_shot", 11, shm.one_shot,
              "1 sync per chunk; (n+3)·S through memory: small S, or two ranks", SHARED_MEMORY),
    Algorithm("all_reduce", "shm_two_shot", 12, shm.two_shot,
              "2 syncs per chunk; ≈5·S through memory: large S on 3+ ranks", SHARED_MEMORY),
    Algorithm("broadcast", "shm", 11, shm.broadcast, "1 sync per chunk; 2·S", SHARED_MEMORY),
    Algorithm("barrier", "shm", 11, shm.barrier, "one round of flags", SHARED_MEMORY),
]
ALGORITHMS: dict[str, dict[str, Algorithm]] = {}
for _entry in _ENTRIES:
    ALGORITHMS.setdefault(_entry.collective, {})[_entry.name] = _entry


def _by_size(collective: str, nbytes: int, size: int, tunables: Tunables, shared: bool) -> str:
    if shared:
        if collective == "all_reduce":
            one_shot_limit = 1 << 62 if size <= 2 else (256 << 10 if size <= 4 else 64 << 10)
            return "shm_one_shot" if nbytes <= one_shot_limit else "shm_two_shot"
        return "shm"
    small = nbytes <= tunables.small_message_bytes
    if collective == "all_reduce":
        return "recursive_doubling" if small else "ring"
    if collective == "broadcast":
        return "binomial" if small else "pipeline"
    return next(name for name, a in ALGORITHMS[collective].items() if a.kind == MESSAGES)


def choose(collective: str, nbytes: int, size: int, tunables: Tunables, shared: bool = False) -> Algorithm:
    """The algorithm for this call: ACCORD_ALGORITHM's choice, else the size rule
    (``tunables`` come from the environment when the group was created). ``shared``: the
    group has shared memory (all members on one host).

    Raises:
        ValueError: ACCORD_ALGORITHM names an algorithm that does not exist for this
            collective (the message lists the known ones), or a shared-memory one for a
            group that has no shared memory.
    """
    table = ALGORITHMS[collective]
    forced = tunables.algorithms.get(collective)
    if forced is not None:
        if forced not in table:
            raise ValueError(f"ACCORD_ALGORITHM asks for {collective}={forced!r}; known "
                             f"{collective} algorithms: {sorted(table)}")
        if table[forced].kind == SHARED_MEMORY and not shared:
            raise ValueError(f"ACCORD_ALGORITHM asks for {collective}={forced!r}, which needs "
                             f"shared memory, but this group's ranks are not all on one host "
                             f"(or ACCORD_TRANSPORT=tcp)")
        return table[forced]
    return table[_by_size(collective, nbytes, size, tunables, shared)]
