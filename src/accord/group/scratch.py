"""Scratch memory of a group: per thread, two independent buffers reused across calls.

Owns: ``Scratch.array(count, dtype, which)`` — a NumPy array of ``count`` elements over this
thread's buffer ``which`` (0 or 1), grown when too small and otherwise reused, so that no
call allocates on the hot path. Must not know about calls, algorithms or transports.
"""

from __future__ import annotations

import threading

import numpy as np


class Scratch(threading.local):
    """One per group; each thread that runs the group's calls sees its own buffers."""

    def __init__(self) -> None:
        self._stores: list[bytearray | None] = [None, None]
        self._last: list[np.ndarray | None] = [None, None]

    def array(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray:
        cached = self._last[which]
        if cached is not None and cached.size == count and cached.dtype == dtype:
            return cached
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        store = self._stores[which]
        if store is None or len(store) < nbytes:
            store = self._stores[which] = bytearray(max(nbytes, 4096))
        array = self._last[which] = np.frombuffer(store, dtype=dtype, count=count)
        return array
