"""Every algorithm by collective, and ``choose``: the one a call uses.

Owns: gathering the ``ALGORITHMS`` and ``RULES`` of the algorithm modules listed in
``_MODULES`` into one table, and the choice: ACCORD_ALGORITHM's override first, else the
size rule of the group's kind (shared memory when every member is on one host and the
collective has a shared-memory algorithm, else messages). Every registered algorithm is run
by the test matrix, not only the defaults. Must not know about transports or groups.
"""

from __future__ import annotations

import importlib

from ..config import Tunables
from .algorithm import COLLECTIVE_NAMES, COLLECTIVES, MESSAGES, SHARED_MEMORY, Algorithm, Rule

# Algorithm modules (each ends with ALGORITHMS and RULES). Add new ones here.
_MODULES = (
    "allreduce",
    "broadcast",
    "barrier",
    "shm",
    "shm_rooted",
    "shm_exchange",
    "shm_cma",
    "reduce",
    "allgather",
    "gather",
    "scatter",
    "reduce_scatter",
    "alltoall",
)

ALGORITHMS: dict[str, dict[str, Algorithm]] = {}
RULES: dict[tuple[str, str], Rule] = {}
for _name in _MODULES:
    _module = importlib.import_module(f"{__package__}.{_name}")
    for _entry in _module.ALGORITHMS:
        ALGORITHMS.setdefault(_entry.collective, {})[_entry.name] = _entry
    RULES.update(_module.RULES)

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES",
    "COLLECTIVE_NAMES",
    "MESSAGES",
    "RULES",
    "SHARED_MEMORY",
    "Algorithm",
    "choose",
]


CMA = "cma"


def choose(
    collective: str, nbytes: int, size: int, tunables: Tunables, shared: bool = False, cma: bool = False
) -> Algorithm:
    """The algorithm for this call: ACCORD_ALGORITHM's choice, else the size rule of the best
    kind the group offers — single-copy shared memory (``cma``), then shared memory
    (``shared``: all members on one host), then messages. A rule may decline (None): the next
    kind's rule decides. ``tunables`` come from the environment when the group was created.

    Raises:
        ValueError: ACCORD_ALGORITHM names an algorithm that does not exist for this
            collective (the message lists the known ones), or one of a kind this group lacks.
    """
    table = ALGORITHMS[collective]
    kinds = [k for k, ok in ((CMA, cma and shared), (SHARED_MEMORY, shared), (MESSAGES, True)) if ok]
    forced = tunables.algorithms.get(collective)
    if forced is not None:
        if forced not in table:
            raise ValueError(
                f"ACCORD_ALGORITHM asks for {collective}={forced!r}; known "
                f"{collective} algorithms: {sorted(table)}"
            )
        if table[forced].kind not in kinds:
            raise ValueError(
                f"ACCORD_ALGORITHM asks for {collective}={forced!r}, which needs "
                f"{'single-copy reads of peer memory' if table[forced].kind == CMA else 'shared memory'}"
                f", but this group has none (ranks on several hosts, ACCORD_TRANSPORT=tcp, "
                f"or ACCORD_CMA=0 / not permitted)"
            )
        return table[forced]
    for kind in kinds:
        rule = RULES.get((collective, kind))
        name = rule(nbytes, size, tunables) if rule is not None else None
        if name is not None:
            return table[name]
    raise KeyError(f"no algorithm for {collective}")  # pragma: no cover - messages always has one
