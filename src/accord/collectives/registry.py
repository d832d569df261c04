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
from . import allreduce, barrier, broadcast


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    code: int  # carried in the fingerprint, so ranks that chose differently get an error
    run: Callable[..., None]
    cost: str


#: Collective names and their fingerprint codes (never renumber: peers compare them).
COLLECTIVES: dict[str, int] = {
    "barrier": 1, "broadcast": 2, "all_reduce": 3, "reduce": 4, "all_gather": 5, "gather": 6,
    "scatter": 7, "reduce_scatter": 8, "all_to_all": 9, "monitored_barrier": 10,
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
]
ALGORITHMS: dict[str, dict[str, Algorithm]] = {}
for _entry in _ENTRIES:
    ALGORITHMS.setdefault(_entry.collective, {})[_entry.name] = _entry


def _by_size(collective: str, nbytes: int, tunables: Tunables) -> str:
    small = nbytes <= tunables.small_message_bytes
    if collective == "all_reduce":
        return "recursive_doubling" if small else "ring"
    if collective == "broadcast":
        return "binomial" if small else "pipeline"
    return next(iter(ALGORITHMS[collective]))


def choose(collective: str, nbytes: int, size: int, tunables: Tunables) -> Algorithm:
    """The algorithm for this call: ACCORD_ALGORITHM's choice, else the size rule
    (``tunables`` come from the environment when the group was created).

    Raises:
        ValueError: ACCORD_ALGORITHM names an algorithm that does not exist for this
            collective (the message lists the known ones).
    """
    table = ALGORITHMS[collective]
    forced = tunables.algorithms.get(collective)
    if forced is not None:
        if forced not in table:
            raise ValueError(f"ACCORD_ALGORITHM asks for {collective}={forced!r}; known "
                             f"{collective} algorithms: {sorted(table)}")
        return table[forced]
    return table[_by_size(collective, nbytes, tunables)]
