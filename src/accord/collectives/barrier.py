"""barrier: the dissemination algorithm (Hensgen, Finkel, Manber 1988).

Owns: the schedule. In round k each rank sends an empty message to rank + 2^k and waits for
one from rank - 2^k; after ⌈log2 p⌉ rounds every rank has (transitively) heard from all.
Cost: ⌈log2 p⌉·α. Must not know about transports: only ``Peers``.
"""

from __future__ import annotations

import numpy as np

from .algorithm import MESSAGES, Algorithm
from .peers import PointToPoint, exchange

_EMPTY = np.empty(0, dtype=np.uint8)


def dissemination(peers: PointToPoint) -> None:
    n, r = peers.size, peers.rank
    distance, step = 1, 0
    while distance < n:
        exchange(peers, (r + distance) % n, _EMPTY, (r - distance) % n, np.empty(0, dtype=np.uint8), step)
        distance, step = distance << 1, step + 1


ALGORITHMS = [Algorithm("barrier", "dissemination", 1, dissemination, "⌈log2 p⌉·α")]
RULES = {("barrier", MESSAGES): lambda nbytes, size, t: "dissemination"}
