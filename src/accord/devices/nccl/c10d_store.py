"""An accord Store seen as a torch ``c10d.Store``: what torch's ProcessGroupNCCL rendezvouses on.

Owns: ``C10dStore``, a Python subclass of ``torch.distributed.Store`` whose every method
forwards to an accord Store (TCPStore, FileStore, HashStore, PrefixStore, the torch backend's
``TorchStore``), so a torch process group created by accord meets its peers through the store
accord's group already uses: no second rendezvous, no second port. Must not know about ranks,
groups or devices.

Lifetime: torch's C++ side keeps only the C++ half of a Python store; the Python object that
holds the overrides must outlive every torch object using it (the owner keeps a reference).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from ...store.base import Store


class C10dStore(dist.Store):
    """torch's Store interface over an accord ``Store``."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def set(self, key: str, value: Any) -> None:
        self.store.set(key, value)

    def get(self, key: str) -> bytes:
        return self.store.get(key)

    def add(self, key: str, amount: int) -> int:
        return self.store.add(key, amount)

    def compare_set(self, key: str, expected_value: Any, desired_value: Any) -> bytes:
        return self.store.compare_set(key, expected_value, desired_value)

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        self.store.wait(list(keys), timeout)

    def check(self, keys: Sequence[str]) -> bool:
        return self.store.check(list(keys))

    def delete_key(self, key: str) -> bool:
        return self.store.delete_key(key)

    def num_keys(self) -> int:
        return self.store.num_keys()

    def append(self, key: str, value: Any) -> None:
        self.store.append(key, value)

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        return self.store.multi_get(list(keys))

    def multi_set(self, keys: Sequence[str], values: Sequence[Any]) -> None:
        self.store.multi_set(list(keys), list(values))

    def has_extended_api(self) -> bool:
        return True

    def set_timeout(self, timeout: timedelta) -> None:
        self.store.set_timeout(timeout)

    def clone(self) -> C10dStore:
        return C10dStore(self.store.clone())
