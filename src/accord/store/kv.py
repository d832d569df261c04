"""The key-value table behind HashStore and the TCPStore server: every operation, no waiting.

Owns: the semantics of each store operation on an in-memory table (see ``base``). Waiting is
left to the caller — HashStore waits on a Condition, the TCP server parks requests until a key
appears — so this module knows no threads, sockets or clocks. Not thread-safe by itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ..errors import QueueEmptyError
from .base import parse_counter


class KeyValueTable:
    """Keys → bytes, plus named FIFO queues in their own namespace."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.queues: dict[str, deque[bytes]] = {}

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def add(self, key: str, amount: int) -> int:
        current = self.data.get(key)
        total = (parse_counter(key, current) if current is not None else 0) + int(amount)
        self.data[key] = str(total).encode("ascii")
        return total

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        current = self.data.get(key)
        if current is None:
            if expected == b"":
                self.data[key] = desired
                return desired
            return expected
        if current == expected:
            self.data[key] = desired
            return desired
        return current

    def missing(self, keys: Sequence[str]) -> list[str]:
        return [k for k in keys if k not in self.data]

    def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def num_keys(self) -> int:
        return len(self.data)

    def append(self, key: str, value: bytes) -> None:
        self.data[key] = self.data.get(key, b"") + value

    def multi_set(self, keys: Sequence[str], values: Sequence[bytes]) -> None:
        for key, value in zip(keys, values):
            self.data[key] = value

    def queue_push(self, key: str, value: bytes) -> None:
        self.queues.setdefault(key, deque()).append(value)

    def queue_pop(self, key: str) -> bytes:
        """Pop the oldest value; QueueEmptyError if there is none."""
        queue = self.queues.get(key)
        if not queue:
            raise QueueEmptyError(f"queue_pop({key!r}): the queue is empty")
        value = queue.popleft()
        if not queue:
            del self.queues[key]
        return value

    def queue_len(self, key: str) -> int:
        queue = self.queues.get(key)
        return len(queue) if queue else 0

    def list_keys(self) -> list[str]:
        return sorted(self.data)
