"""What one benchmark iteration does, for each collective, on accord or on torch (gloo/mpi).

Owns: buffer creation per implementation and size, the call itself, and the busbw factor of
each collective (nccl-tests' conventions: see ``BUS_FACTOR``). Runs inside the worker
processes. Must not know about reporting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Collective:
    name: str
    #: busbw = algbw × factor(n) (nccl-tests): all_reduce 2(n-1)/n; gathers/scatters (n-1)/n.
    factor: Callable[[int], float]
    #: whether "size" means the total over ranks (all_gather output, reduce_scatter input)
    total_size: bool = False
    sized: bool = True


COLLECTIVES: dict[str, Collective] = {c.name: c for c in [
    Collective("all_reduce", lambda n: 2 * (n - 1) / n),
    Collective("broadcast", lambda n: 1.0),
    Collective("barrier", lambda n: 0.0, sized=False),
]}


def per_rank_count(op: str, nbytes: int, world: int, itemsize: int) -> int:
    """Elements in each rank's buffer for a benchmark row of ``nbytes``."""
    count = max(nbytes // itemsize, 1)
    if COLLECTIVES[op].total_size:
        count = max(count // world, 1)
    return count


def make_call(api: Any, op: str, count: int, rank: int, world: int, torch: Any = None) -> Callable[[], None]:
    """A zero-argument function doing one ``op`` with ``api`` (accord, or torch.distributed)."""
    if torch is not None:
        data = torch.zeros(count, dtype=torch.float32)
    else:
        data = np.zeros(count, dtype=np.float32)
    if op == "all_reduce":
        return lambda: api.all_reduce(data)
    if op == "broadcast":
        return lambda: api.broadcast(data, src=0)
    if op == "barrier":
        return lambda: api.barrier()
    raise ValueError(f"unknown collective {op!r}; known: {sorted(COLLECTIVES)}")
