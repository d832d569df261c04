"""accord's Store interface over a torch.distributed Store (the one torch hands a backend).

Owns: ``TorchStore`` — every accord Store operation on a torch ``Store`` object (TCPStore,
FileStore, HashStore, PrefixStore over any of them, or accord's own stores, which have the
same methods), with torch's errors turned into accord's (a timeout becomes a
StoreTimeoutError naming the missing keys) and ``local_address`` found by walking down to a
TCPStore's host. Must not know about ranks, groups or transports.

Threads: torch's store calls release the GIL while they wait, so a thread blocked in ``get``
does not stall the others; ``clone`` gives a thread a connection of its own.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from ...errors import DistStoreError, QueueEmptyError, StoreTimeoutError
from ...store.base import Store, Value, check_key, check_keys, to_bytes
from ...timeouts import format_seconds

R = TypeVar("R")


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or "timeout" in str(exc).lower() or "timed out" in str(exc).lower()


class TorchStore(Store):
    """A torch ``Store`` seen through accord's Store API."""

    def __init__(self, store: Any) -> None:
        if isinstance(store, TorchStore):
            store = store.torch_store
        self.torch_store: Any = store
        super().__init__(_timeout_of(store))

    def __repr__(self) -> str:
        return f"TorchStore({type(self.torch_store).__name__})"

    def set_timeout(self, timeout: timedelta) -> None:
        super().set_timeout(timeout)
        self.torch_store.set_timeout(self.timeout)

    # -- error translation ---------------------------------------------------------------------
    def _call(
        self, what: str, fn: Callable[[], R], keys: Sequence[str] = (), seconds: float | None = None
    ) -> R:
        try:
            return fn()
        except (DistStoreError, TimeoutError):
            raise
        except Exception as exc:
            if type(exc).__name__ == "QueueEmptyError":
                raise QueueEmptyError(f"{what}: {exc}") from exc
            if keys and _is_timeout(exc):
                missing = [k for k in keys if not self._present(k)] or list(keys)
                budget = self.timeout.total_seconds() if seconds is None else seconds
                raise StoreTimeoutError(
                    f"{what}: keys {missing} were not set within {format_seconds(budget)}"
                ) from exc
            raise DistStoreError(
                f"{what} on {type(self.torch_store).__name__} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _present(self, key: str) -> bool:
        try:
            return bool(self.torch_store.check([key]))
        except Exception:  # noqa: BLE001 — only used to word an error
            return False

    # -- the operations -----------------------------------------------------------------------
    def set(self, key: str, value: Value) -> None:
        data = to_bytes(value)
        self._call(f"set({key!r})", lambda: self.torch_store.set(check_key(key), data))

    def get(self, key: str) -> bytes:
        return bytes(self._call(f"get({key!r})", lambda: self.torch_store.get(check_key(key)), [key]))

    def add(self, key: str, amount: int) -> int:
        return int(self._call(f"add({key!r})", lambda: self.torch_store.add(check_key(key), int(amount))))

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        expected, desired = to_bytes(expected_value), to_bytes(desired_value)
        return bytes(
            self._call(
                f"compare_set({key!r})",
                lambda: self.torch_store.compare_set(check_key(key), expected, desired),
            )
        )

    def wait(self, keys: Sequence[str], timeout: timedelta | float | None = None) -> None:
        names = check_keys(keys)
        seconds = self._seconds(timeout)
        self._call("wait", lambda: self.torch_store.wait(names, timedelta(seconds=seconds)), names, seconds)

    def check(self, keys: Sequence[str]) -> bool:
        names = check_keys(keys)
        return bool(self._call("check", lambda: self.torch_store.check(names)))

    def delete_key(self, key: str) -> bool:
        return bool(self._call(f"delete_key({key!r})", lambda: self.torch_store.delete_key(check_key(key))))

    def num_keys(self) -> int:
        return int(self._call("num_keys", self.torch_store.num_keys))

    def append(self, key: str, value: Value) -> None:
        data = to_bytes(value)
        self._call(f"append({key!r})", lambda: self.torch_store.append(check_key(key), data))

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        names = check_keys(keys)
        values = self._call("multi_get", lambda: self.torch_store.multi_get(names), names)
        return [bytes(v) for v in values]

    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        names, data = check_keys(keys), [to_bytes(v) for v in values]
        self._call("multi_set", lambda: self.torch_store.multi_set(names, data))

    def queue_push(self, key: str, value: Value) -> None:
        data = to_bytes(value)
        self._call(f"queue_push({key!r})", lambda: self.torch_store.queue_push(check_key(key), data))

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        return bytes(
            self._call(
                f"queue_pop({key!r})",
                lambda: self.torch_store.queue_pop(check_key(key), block=block),
                [key] if block else (),
            )
        )

    def queue_len(self, key: str) -> int:
        return int(self._call(f"queue_len({key!r})", lambda: self.torch_store.queue_len(check_key(key))))

    def list_keys(self) -> list[str]:
        return sorted(self._call("list_keys", self.torch_store.list_keys))

    def clone(self) -> Store:
        return TorchStore(self._call("clone", self.torch_store.clone))

    def local_address(self) -> str | None:
        """The local IP address that reaches the TCPStore under the prefixes, if any."""
        base = self.torch_store
        while hasattr(base, "underlying_store"):
            base = base.underlying_store
        if hasattr(base, "local_address") and not hasattr(base, "libuvBackend"):
            address: str | None = base.local_address()  # one of accord's own stores
            return address
        host, port = getattr(base, "host", None), getattr(base, "port", None)
        if not host or port is None:
            return None
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((socket.gethostbyname(host), int(port)))
                return str(probe.getsockname()[0])
        except OSError:
            return None


def _timeout_of(store: Any) -> timedelta:
    timeout = getattr(store, "timeout", None)
    return timeout if isinstance(timeout, timedelta) else timedelta(minutes=5)
