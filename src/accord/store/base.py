"""The Store API: torch.distributed's key-value store operations, one contract for all stores.

Owns: the abstract ``Store`` (names, parameters and semantics of every operation), value and
key normalisation, and the timeout/error conventions. Must not know what ranks, groups or
transports are.

Semantics, identical for every store (HashStore, FileStore, PrefixStore, TCPStore):

- Values are bytes; a ``str`` value is stored UTF-8 encoded. Keys are ``str``.
- ``get``, ``wait``, ``multi_get`` and ``queue_pop(block=True)`` wait up to the timeout for
  missing keys, then raise ``StoreTimeoutError`` (a ``DistStoreError``, also a TimeoutError)
  naming the keys that never appeared. A timeout of zero checks once without waiting.
- ``add`` on a key holding a non-integer value raises ``DistStoreError``.
- ``compare_set(key, expected, desired)``: if the key holds ``expected`` (or is missing and
  ``expected`` is empty) it is set to ``desired``; the call returns the value now stored — or,
  for a missing key with a non-empty ``expected``, ``expected`` itself (torch's behaviour).
- Queues (``queue_push``/``queue_pop``/``queue_len``) live in their own namespace: they are
  not keys for ``get`` or ``num_keys``. ``queue_pop(block=False)`` on an empty queue raises
  ``QueueEmptyError``. TCPStore only, as torch's server: ``check`` and ``wait`` count a
  non-empty queue as present (a blocking ``queue_pop`` waits that way).
- ``list_keys`` lists the user's keys. ``num_keys`` counts them too, except on TCPStore,
  which counts every key of the server as torch's does: that includes "init/", which the
  stores of a ``world_size`` with ``wait_for_workers`` add to (so after one ``set`` on a
  fresh ``TCPStore(host, 0, 1, True)``, ``num_keys()`` is 2, as the reference page says).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import timedelta

from ..errors import DistStoreError
from ..timeouts import DEFAULT_STORE_TIMEOUT, to_seconds

Value = str | bytes | bytearray | memoryview


def to_bytes(value: Value, what: str = "value") -> bytes:
    """Normalise a store value: bytes-like as is, str as UTF-8."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"store {what} must be str or bytes, got {type(value).__name__}")


def check_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"store keys must be str, got {type(key).__name__}")
    return key


def check_keys(keys: Sequence[str]) -> list[str]:
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a list of str, not a single string")
    return [check_key(k) for k in keys]


def parse_counter(key: str, value: bytes) -> int:
    """The integer a key holds, for ``add``; DistStoreError if it holds something else."""
    try:
        return int(value.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise DistStoreError(
            f"add({key!r}): the key holds {value[:40]!r}, which is not an integer; "
            f"add() works only on keys created by add() or set to a decimal number"
        ) from None


class Store(ABC):
    """A key-value store shared by the processes of a job (torch.distributed.Store)."""

    def __init__(self, timeout: timedelta = DEFAULT_STORE_TIMEOUT) -> None:
        self._timeout = timedelta(seconds=to_seconds(timeout))

    # -- timeout ------------------------------------------------------------------------------
    @property
    def timeout(self) -> timedelta:
        """The default timeout of waiting operations."""
        return self._timeout

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timedelta(seconds=to_seconds(timeout))

    def _seconds(self, timeout: timedelta | float | None) -> float:
        return to_seconds(timeout, default=self._timeout)

    # -- the operations -----------------------------------------------------------------------
    @abstractmethod
    def set(self, key: str, value: Value) -> None:
        """Store ``value`` under ``key``, replacing any value there."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting up to the timeout for it to be set."""

    @abstractmethod
    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the integer under ``key`` (missing = 0) and return the sum."""

    @abstractmethod
    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        """Set ``key`` to ``desired_value`` if it holds ``expected_value``; see the module doc."""

    @abstractmethod
    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        """Block until every key in ``keys`` is set, or raise StoreTimeoutError."""

    @abstractmethod
    def check(self, keys: Sequence[str]) -> bool:
        """Whether every key in ``keys`` is set, without waiting."""

    @abstractmethod
    def delete_key(self, key: str) -> bool:
        """Delete ``key``; True if it existed."""

    @abstractmethod
    def num_keys(self) -> int:
        """The number of keys set."""

    @abstractmethod
    def append(self, key: str, value: Value) -> None:
        """Append ``value`` to the bytes under ``key`` (creating it if missing)."""

    @abstractmethod
    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        """The values of ``keys``, waiting up to the timeout for all of them."""

    @abstractmethod
    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        """Set each key to its value, as one operation."""

    @abstractmethod
    def queue_push(self, key: str, value: Value) -> None:
        """Append ``value`` to the queue named ``key``."""

    @abstractmethod
    def queue_pop(self, key: str, block: bool = True) -> bytes:
        """Remove and return the oldest value of queue ``key``.

        With ``block=True`` waits up to the timeout for one; with ``block=False`` raises
        QueueEmptyError at once if the queue is empty.
        """

    @abstractmethod
    def queue_len(self, key: str) -> int:
        """The number of values in queue ``key``."""

    @abstractmethod
    def list_keys(self) -> list[str]:
        """Every key set, sorted."""

    @abstractmethod
    def clone(self) -> Store:
        """A new handle on the same store, safe to use from another thread."""

    # -- provided -----------------------------------------------------------------------------
    def has_extended_api(self) -> bool:
        """Whether append/multi_get/multi_set/queues are supported: always, in accord."""
        return True

    def barrier(self, key: str, world_size: int, timeout: timedelta | None = None) -> None:
        """Wait until ``world_size`` callers have called ``barrier`` with this ``key``."""
        arrived = self.add(f"{key}/arrived", 1)
        if arrived == world_size:
            self.set(f"{key}/done", b"1")
        self.wait([f"{key}/done"], timeout)

    def local_address(self) -> str | None:
        """accord's addition: the local IP address used to reach this store, if networked.

        The TCP transport publishes it so that peers reach this host the way it reaches the
        store. None for stores that involve no network.
        """
        return None

    def close(self) -> None:  # noqa: B027 (not abstract: a store holding nothing need not override it)
        """Release this handle's resources (sockets, files). Idempotent."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
