"""HashStore: a thread-safe in-process store (torch.distributed.HashStore).

Owns: waiting on a Condition over a KeyValueTable. For tests and for ranks that are threads of
one process. Must not know about ranks, sockets or files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TypeVar

from ..errors import StoreTimeoutError
from ..timeouts import DEFAULT_STORE_TIMEOUT, Deadline, format_seconds
from .base import Store, Value, check_key, check_keys, to_bytes
from .kv import KeyValueTable

T = TypeVar("T")


class HashStore(Store):
    """An in-memory store shared by the threads of one process."""

    def __init__(self, timeout: timedelta = DEFAULT_STORE_TIMEOUT) -> None:
        super().__init__(timeout)
        self._table = KeyValueTable()
        self._changed = threading.Condition()

    def __repr__(self) -> str:
        return f"HashStore(keys={self._table.num_keys()})"

    def _write(self, fn: Callable[[KeyValueTable], T]) -> T:
        with self._changed:
            result = fn(self._table)
            self._changed.notify_all()
            return result

    def _await(self, ready: Callable[[], bool], seconds: float, describe: Callable[[], str]) -> None:
        """Wait (Condition held) until ready() or the timeout; raise naming what is missing."""
        deadline = Deadline.after(seconds)
        while not ready():
            remaining = deadline.remaining()
            if remaining <= 0:
                raise StoreTimeoutError(
                    f"HashStore: timed out after {format_seconds(seconds)} waiting for {describe()}"
                )
            self._changed.wait(remaining)

    def set(self, key: str, value: Value) -> None:
        key, data = check_key(key), to_bytes(value)
        self._write(lambda t: t.set(key, data))

    def get(self, key: str) -> bytes:
        return self.multi_get([key])[0]

    def add(self, key: str, amount: int) -> int:
        key = check_key(key)
        return self._write(lambda t: t.add(key, int(amount)))

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        key = check_key(key)
        expected, desired = to_bytes(expected_value), to_bytes(desired_value)
        return self._write(lambda t: t.compare_set(key, expected, desired))

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        keys = check_keys(keys)
        with self._changed:
            self._await(
                lambda: not self._table.missing(keys),
                self._seconds(timeout),
                lambda: f"keys {self._table.missing(keys)}",
            )

    def check(self, keys: Sequence[str]) -> bool:
        keys = check_keys(keys)
        with self._changed:
            return not self._table.missing(keys)

    def delete_key(self, key: str) -> bool:
        key = check_key(key)
        return self._write(lambda t: t.delete(key))

    def num_keys(self) -> int:
        with self._changed:
            return self._table.num_keys()

    def append(self, key: str, value: Value) -> None:
        key, data = check_key(key), to_bytes(value)
        self._write(lambda t: t.append(key, data))

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        keys = check_keys(keys)
        with self._changed:
            self._await(
                lambda: not self._table.missing(keys),
                self._seconds(None),
                lambda: f"keys {self._table.missing(keys)}",
            )
            return [self._table.data[k] for k in keys]

    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        keys = check_keys(keys)
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        data = [to_bytes(v) for v in values]
        self._write(lambda t: t.multi_set(keys, data))

    def queue_push(self, key: str, value: Value) -> None:
        key, data = check_key(key), to_bytes(value)
        self._write(lambda t: t.queue_push(key, data))

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        key = check_key(key)
        with self._changed:
            if block:
                self._await(
                    lambda: self._table.queue_len(key) > 0,
                    self._seconds(None),
                    lambda: f"a value in queue {key!r}",
                )
            return self._table.queue_pop(key)

    def queue_len(self, key: str) -> int:
        key = check_key(key)
        with self._changed:
            return self._table.queue_len(key)

    def list_keys(self) -> list[str]:
        with self._changed:
            return self._table.list_keys()

    def clone(self) -> HashStore:
        clone = HashStore.__new__(HashStore)
        Store.__init__(clone, self.timeout)
        clone._table, clone._changed = self._table, self._changed
        return clone
