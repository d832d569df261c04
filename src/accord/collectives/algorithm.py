"""What an algorithm module declares: ``Algorithm`` entries, size rules, collective codes.

Owns: the ``Algorithm`` record (name, fingerprint code, run function, one-line cost, kind),
the two kinds (``MESSAGES`` over Peers, ``SHARED_MEMORY`` over Slots), and ``COLLECTIVES``,
the codes carried in message fingerprints. Each algorithm module ends with a list
``ALGORITHMS`` of its entries and a dict ``RULES`` {(collective, kind): rule}, where a rule maps
(nbytes, group size, tunables) to the name of the algorithm to use. Must not know about
transports or groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import Tunables

MESSAGES, SHARED_MEMORY = "messages", "shm"

Rule = Callable[[int, int, Tunables], str | None]  # None: decline, the next kind's rule decides


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
    "barrier": 1,
    "broadcast": 2,
    "all_reduce": 3,
    "reduce": 4,
    "all_gather": 5,
    "gather": 6,
    "scatter": 7,
    "reduce_scatter": 8,
    "all_to_all": 9,
    "monitored_barrier": 10,
    "shm_setup": 11,
    "object": 12,
}
COLLECTIVE_NAMES: dict[int, str] = {code: name for name, code in COLLECTIVES.items()}
