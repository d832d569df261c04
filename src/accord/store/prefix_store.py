"""PrefixStore: a view of another store in which every key lives under ``"{prefix}/"``.

Owns: the key renaming, and hiding other prefixes' keys from ``list_keys``/``num_keys``.
Everything else — values, waiting, timeouts, errors — is the underlying store's. Must not
know which kind of store it wraps.

As torch's PrefixStore: queues are renamed too, the timeout is the underlying store's
(``set_timeout`` changes it there), and ``clone()`` wraps a clone of the underlying store.
Closing a PrefixStore leaves the store it wraps open (the caller owns that one), except for
a PrefixStore made by ``clone()``, which owns its cloned underlying store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from .base import Store, Value, check_key, check_keys


class PrefixStore(Store):
    """Every key ``k`` is kept as ``f"{prefix}/{k}"`` in ``store`` (torch's PrefixStore)."""

    def __init__(self, prefix: str, store: Store) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"PrefixStore prefix must be str, got {type(prefix).__name__}")
        if not isinstance(store, Store):
            raise TypeError(f"PrefixStore needs an accord Store to wrap, got {type(store).__name__}")
        super().__init__(store.timeout)
        self._prefix = prefix
        self._store = store
        self._owns_store = False

    def __repr__(self) -> str:
        return f"PrefixStore({self._prefix!r}, {self._store!r})"

    @property
    def underlying_store(self) -> Store:
        """The store this one wraps."""
        return self._store

    @property
    def prefix(self) -> str:
        return self._prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}/{check_key(key)}"

    def _keys(self, keys: Sequence[str]) -> list[str]:
        return [self._key(k) for k in check_keys(keys)]

    # -- timeout: the underlying store's ---------------------------------------------------
    @property
    def timeout(self) -> timedelta:
        return self._store.timeout

    def set_timeout(self, timeout: timedelta) -> None:
        self._store.set_timeout(timeout)

    # -- the operations ----------------------------------------------------------------------
    def set(self, key: str, value: Value) -> None:
        self._store.set(self._key(key), value)

    def get(self, key: str) -> bytes:
        return self._store.get(self._key(key))

    def add(self, key: str, amount: int) -> int:
        return self._store.add(self._key(key), amount)

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        return self._store.compare_set(self._key(key), expected_value, desired_value)

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        self._store.wait(self._keys(keys), timeout)

    def check(self, keys: Sequence[str]) -> bool:
        return self._store.check(self._keys(keys))

    def delete_key(self, key: str) -> bool:
        return self._store.delete_key(self._key(key))

    def num_keys(self) -> int:
        return len(self.list_keys())

    def append(self, key: str, value: Value) -> None:
        self._store.append(self._key(key), value)

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        return self._store.multi_get(self._keys(keys))

    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        self._store.multi_set(self._keys(keys), values)

    def queue_push(self, key: str, value: Value) -> None:
        self._store.queue_push(self._key(key), value)

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        return self._store.queue_pop(self._key(key), block)

    def queue_len(self, key: str) -> int:
        return self._store.queue_len(self._key(key))

    def list_keys(self) -> list[str]:
        head = f"{self._prefix}/"
        return sorted(k[len(head) :] for k in self._store.list_keys() if k.startswith(head))

    def clone(self) -> PrefixStore:
        clone = PrefixStore(self._prefix, self._store.clone())
        clone._owns_store = True
        return clone

    def local_address(self) -> str | None:
        return self._store.local_address()

    def close(self) -> None:
        if self._owns_store:
            self._store.close()
