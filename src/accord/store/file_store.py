"""FileStore: a store shared by processes through one file (torch.distributed.FileStore).

Owns: the file format (an append-only log), locking, replaying the log into a KeyValueTable,
polling for waiting operations, and deleting the file when the last of ``world_size`` handles
closes. The meaning of each operation is ``kv.KeyValueTable``'s. Must not know what ranks,
groups or transports are.

File format: the 19-byte header ``b"ACCORD-FILESTORE-1\\n"``, then records, each
``<op: u8><key length: u32 LE><value length: u32 LE><key UTF-8><value>``. Ops: SET, APPEND,
DELETE, QPUSH, QPOP (state changes, computed by the writer) and OPEN, CLOSE (bookkeeping for
cleanup: they never reach the table, so ``num_keys``/``list_keys`` show only the user's keys).

Concurrency: a record is written with one ``write`` on an ``O_APPEND`` descriptor while the
writer holds ``flock(LOCK_EX)``; readers replay new records under ``LOCK_SH``. An operation
that reads before it writes (add, compare_set, queue_pop …) replays and writes under one
exclusive lock, so it is atomic across processes. flock works across hosts on NFSv4 and most
cluster filesystems. Each handle also holds a thread lock: one handle may be shared by threads.

Cleanup as torch's: with ``world_size > 0`` the handle that closes the ``world_size``-th time
deletes the file. Handles made by ``clone()`` are not counted (they neither open nor close a
"seat"), so ranks may clone freely. A file left behind by a crashed job still holds its keys
and seats: use a fresh path per job.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

from ..errors import DistStoreError, QueueEmptyError, StoreTimeoutError
from ..timeouts import DEFAULT_STORE_TIMEOUT, Deadline, format_seconds
from .base import Store, Value, check_key, check_keys, parse_counter, to_bytes
from .kv import KeyValueTable

T = TypeVar("T")

MAGIC = b"ACCORD-FILESTORE-1\n"
RECORD = struct.Struct("<BII")
SET, APPEND, DELETE, QPUSH, QPOP, OPEN, CLOSE = range(1, 8)
_FIRST_POLL_S, _MAX_POLL_S = 0.001, 0.05


def encode_record(op: int, key: str = "", value: bytes = b"") -> bytes:
    raw_key = key.encode("utf-8")
    return RECORD.pack(op, len(raw_key), len(value)) + raw_key + value


class FileStore(Store):
    """A store in one file, shared by every process that opens it."""

    def __init__(
        self, file_name: str | os.PathLike, world_size: int = -1, timeout: timedelta = DEFAULT_STORE_TIMEOUT
    ) -> None:
        super().__init__(timeout)
        self._setup(os.fspath(file_name), int(world_size), counted=True)

    def _setup(self, path: str, world_size: int, counted: bool) -> None:
        self._fd = -1
        self._path, self._world_size, self._counted = path, world_size, counted
        self._lock = threading.Lock()
        self._table = KeyValueTable()
        self._offset, self._opens, self._closes = 0, 0, 0
        self._fd = self._open_locked()
        try:
            self._join()
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise
        finally:
            if self._fd >= 0:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def __repr__(self) -> str:
        return f"FileStore({self._path!r}, world_size={self._world_size})"

    @property
    def path(self) -> str:
        """The file this store lives in."""
        return self._path

    # -- the file ---------------------------------------------------------------------------
    def _open_locked(self) -> int:
        """Open (creating) the file at ``path`` and lock it exclusively.

        If the last handle of an earlier job deleted the file between our open and our lock,
        we hold an orphan: close it and open the file now at ``path``.
        """
        while True:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise DistStoreError(
                    f"FileStore: cannot open {self._path} ({exc.strerror}). Does the directory "
                    f"exist, and may this process write there?"
                ) from exc
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                at_path = os.stat(self._path)
                current = (at_path.st_dev, at_path.st_ino)
            except FileNotFoundError:
                current = None
            opened = os.fstat(fd)
            if current == (opened.st_dev, opened.st_ino):
                return fd
            os.close(fd)  # closing also drops the lock

    def _join(self) -> None:
        """Write the header if the file is new, read it, and take a seat (file locked)."""
        if os.fstat(self._fd).st_size == 0:
            self._write(MAGIC)
        self._replay()
        if not self._counted:
            return
        self._write(encode_record(OPEN))
        self._replay()
        if 0 < self._world_size < self._opens:
            raise DistStoreError(
                f"FileStore {self._path}: this is handle #{self._opens} but world_size is "
                f"{self._world_size}. The file is probably left over from an earlier job: "
                f"delete it or use a fresh path."
            )

    @contextmanager
    def _flocked(self, mode: int) -> Iterator[None]:
        if self._fd < 0:
            raise DistStoreError(f"FileStore {self._path}: this handle is closed; open a new FileStore.")
        fcntl.flock(self._fd, mode)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _corrupt(self, why: str) -> DistStoreError:
        return DistStoreError(
            f"FileStore {self._path}: the file is corrupt ({why}). Another program may have "
            f"written to it, or a process died while writing; delete it and restart the job."
        )

    def _replay(self) -> None:
        """Apply the records appended since our last look (caller holds a flock)."""
        size = os.fstat(self._fd).st_size
        if size == self._offset:
            return
        if size < self._offset:
            raise self._corrupt(f"it shrank from {self._offset} to {size} bytes")
        data = memoryview(os.pread(self._fd, size - self._offset, self._offset))
        pos = 0
        if self._offset == 0:
            if bytes(data[: len(MAGIC)]) != MAGIC:
                raise self._corrupt("it does not start with the accord FileStore header")
            pos = len(MAGIC)
        while pos < len(data):
            pos = self._apply_record(data, pos)
        self._offset = size

    def _apply_record(self, data: memoryview, pos: int) -> int:
        if len(data) - pos < RECORD.size:
            raise self._corrupt(f"a truncated record at byte {self._offset + pos}")
        op: int
        key_len: int
        value_len: int
        op, key_len, value_len = RECORD.unpack_from(data, pos)
        start = pos + RECORD.size
        end = start + key_len + value_len
        if end > len(data) or not SET <= op <= CLOSE:
            raise self._corrupt(f"a bad record (op {op}) at byte {self._offset + pos}")
        try:
            key = str(data[start : start + key_len], "utf-8")
        except UnicodeDecodeError:
            raise self._corrupt(f"a key that is not UTF-8 at byte {self._offset + pos}") from None
        value = bytes(data[start + key_len : end])
        self._apply(op, key, value)
        return end

    def _apply(self, op: int, key: str, value: bytes) -> None:
        table = self._table
        if op == SET:
            table.set(key, value)
        elif op == APPEND:
            table.append(key, value)
        elif op == DELETE:
            table.delete(key)
        elif op == QPUSH:
            table.queue_push(key, value)
        elif op == QPOP:
            if table.queue_len(key) == 0:
                raise self._corrupt(f"a pop from the empty queue {key!r}")
            table.queue_pop(key)
        elif op == OPEN:
            self._opens += 1
        else:
            self._closes += 1

    # -- reading, writing, waiting ----------------------------------------------------------
    def _refresh(self) -> None:
        """Bring the table up to date (thread lock held)."""
        if self._fd >= 0 and os.fstat(self._fd).st_size == self._offset:
            return
        with self._flocked(fcntl.LOCK_SH):
            self._replay()

    def _read(self, fn: Callable[[KeyValueTable], T]) -> T:
        with self._lock:
            self._refresh()
            return fn(self._table)

    def _mutate(self, fn: Callable[[KeyValueTable], tuple[list[bytes], T]]) -> T:
        """Replay, decide the records to write from the current table, write them: atomically."""
        with self._lock, self._flocked(fcntl.LOCK_EX):
            self._replay()
            records, result = fn(self._table)
            if records:
                self._write(b"".join(records))
                self._replay()
            return result

    def _poll(self, attempt: Callable[[], tuple[bool, T]], seconds: float, describe: Callable[[], str]) -> T:
        """Repeat ``attempt`` with a growing pause until it succeeds or the timeout passes."""
        deadline, pause = Deadline.after(seconds), _FIRST_POLL_S
        while True:
            done, result = attempt()
            if done:
                return result
            remaining = deadline.remaining()
            if remaining <= 0:
                raise StoreTimeoutError(
                    f"FileStore {self._path}: timed out after {format_seconds(seconds)} waiting "
                    f"for {describe()}. Did the process that should set it reach that point?"
                )
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _MAX_POLL_S)

    def _await_keys(self, keys: list[str], seconds: float) -> list[bytes]:
        def attempt() -> tuple[bool, list[bytes]]:
            with self._lock:
                self._refresh()
                if self._table.missing(keys):
                    return False, []
                return True, [self._table.data[k] for k in keys]

        return self._poll(attempt, seconds, lambda: f"keys {self._read(lambda t: t.missing(keys))}")

    # -- the operations ---------------------------------------------------------------------
    def set(self, key: str, value: Value) -> None:
        record = encode_record(SET, check_key(key), to_bytes(value))
        self._mutate(lambda t: ([record], None))

    def get(self, key: str) -> bytes:
        return self._await_keys([check_key(key)], self._seconds(None))[0]

    def add(self, key: str, amount: int) -> int:
        key, amount = check_key(key), int(amount)

        def change(t: KeyValueTable) -> tuple[list[bytes], int]:
            current = t.get(key)
            total = (parse_counter(key, current) if current is not None else 0) + amount
            return [encode_record(SET, key, str(total).encode("ascii"))], total

        return self._mutate(change)

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        key = check_key(key)
        expected, desired = to_bytes(expected_value), to_bytes(desired_value)

        def change(t: KeyValueTable) -> tuple[list[bytes], bytes]:
            current = t.get(key)
            if current == expected or (current is None and expected == b""):
                return [encode_record(SET, key, desired)], desired
            return [], expected if current is None else current

        return self._mutate(change)

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        self._await_keys(check_keys(keys), self._seconds(timeout))

    def check(self, keys: Sequence[str]) -> bool:
        keys = check_keys(keys)
        return self._read(lambda t: not t.missing(keys))

    def delete_key(self, key: str) -> bool:
        key = check_key(key)
        record = encode_record(DELETE, key)
        return self._mutate(lambda t: ([record], True) if key in t.data else ([], False))

    def num_keys(self) -> int:
        return self._read(lambda t: t.num_keys())

    def append(self, key: str, value: Value) -> None:
        record = encode_record(APPEND, check_key(key), to_bytes(value))
        self._mutate(lambda t: ([record], None))

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        return self._await_keys(check_keys(keys), self._seconds(None))

    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        keys = check_keys(keys)
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        records = [encode_record(SET, k, to_bytes(v)) for k, v in zip(keys, values)]
        self._mutate(lambda t: (records, None))

    def queue_push(self, key: str, value: Value) -> None:
        record = encode_record(QPUSH, check_key(key), to_bytes(value))
        self._mutate(lambda t: ([record], None))

    def _try_pop(self, key: str) -> tuple[bool, bytes]:
        def change(t: KeyValueTable) -> tuple[list[bytes], tuple[bool, bytes]]:
            if t.queue_len(key) == 0:
                return [], (False, b"")
            return [encode_record(QPOP, key)], (True, t.queues[key][0])

        if self._read(lambda t: t.queue_len(key)) == 0:  # cheap check before the exclusive lock
            return False, b""
        return self._mutate(change)

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        key = check_key(key)
        if block:
            return self._poll(
                lambda: self._try_pop(key), self._seconds(None), lambda: f"a value in queue {key!r}"
            )
        done, value = self._try_pop(key)
        if not done:
            raise QueueEmptyError(f"FileStore {self._path}: queue_pop({key!r}): the queue is empty")
        return value

    def queue_len(self, key: str) -> int:
        key = check_key(key)
        return self._read(lambda t: t.queue_len(key))

    def list_keys(self) -> list[str]:
        return self._read(lambda t: t.list_keys())

    def clone(self) -> FileStore:
        """Another handle on the same file; it is not counted towards ``world_size``."""
        clone = FileStore.__new__(FileStore)
        Store.__init__(clone, self.timeout)
        clone._setup(self._path, self._world_size, counted=False)
        return clone

    def close(self) -> None:
        """Close this handle; the last of ``world_size`` counted handles deletes the file."""
        with self._lock:
            if self._fd < 0:
                return
            try:
                if self._counted:
                    self._leave()
            finally:
                os.close(self._fd)
                self._fd = -1

    def _leave(self) -> None:
        with self._flocked(fcntl.LOCK_EX):
            self._replay()
            self._write(encode_record(CLOSE))
            self._replay()
            if 0 < self._world_size <= self._closes:
                try:
                    os.unlink(self._path)
                except FileNotFoundError:
                    pass

    def __del__(self) -> None:
        try:
            if getattr(self, "_fd", -1) >= 0:
                self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass
