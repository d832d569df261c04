"""FileStore beyond the contract: handles sharing a file, cleanup, bookkeeping, corruption."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from accord.errors import DistStoreError
from accord.store import FileStore
from accord.store.file_store import MAGIC, SET, encode_record

TIMEOUT = timedelta(seconds=10)


def test_two_handles_share_one_file(tmp_path: Path) -> None:
    first, second = FileStore(tmp_path / "s", timeout=TIMEOUT), FileStore(str(tmp_path / "s"))
    first.set("k", "v")
    assert second.get("k") == b"v"
    assert second.add("n", 2) == 2 and first.add("n", 3) == 5
    second.queue_push("q", "item")
    assert first.queue_pop("q", block=False) == b"item"
    assert second.queue_len("q") == 0
    assert first.path == second.path == str(tmp_path / "s")
    first.close()
    second.close()
    assert os.path.exists(tmp_path / "s")  # world_size -1: never deleted


def test_file_deleted_when_the_last_of_world_size_handles_closes(tmp_path: Path) -> None:
    path = tmp_path / "s"
    handles = [FileStore(path, world_size=3, timeout=TIMEOUT) for _ in range(3)]
    clone = handles[0].clone()  # clones take no seat
    assert handles[0].num_keys() == 0 and handles[0].list_keys() == []
    for handle in handles[:2]:
        handle.close()
        handle.close()  # idempotent: closes once
    clone.close()
    assert path.exists()
    handles[2].close()
    assert not path.exists()


def test_a_new_job_after_cleanup_starts_fresh(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = FileStore(path, world_size=1)
    store.set("old", "1")
    store.close()
    fresh = FileStore(path, world_size=1)
    assert fresh.num_keys() == 0
    fresh.close()


def test_more_handles_than_world_size(tmp_path: Path) -> None:
    first = FileStore(tmp_path / "s", world_size=1)
    with pytest.raises(DistStoreError, match="world_size is 1"):
        FileStore(tmp_path / "s", world_size=1)
    first.close()


def test_closed_handle_raises(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    store.close()
    with pytest.raises(DistStoreError, match="closed"):
        store.get("k")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DistStoreError, match="cannot open"):
        FileStore(tmp_path / "no" / "such" / "dir" / "s")


def test_a_foreign_file_is_rejected_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"some unrelated text that is long enough\n")
    with pytest.raises(DistStoreError, match=str(path)):
        FileStore(path)


def test_a_truncated_record_is_reported_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = FileStore(path, timeout=TIMEOUT)
    with open(path, "ab") as file:
        file.write(encode_record(SET, "k", b"value")[:-2])
    with pytest.raises(DistStoreError, match=f"{path}.*corrupt"):
        store.get("k")
    with pytest.raises(DistStoreError, match="corrupt"):
        FileStore(path)


def test_a_garbage_record_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_bytes(MAGIC + b"\xee" + b"\x00" * 8)
    with pytest.raises(DistStoreError, match="bad record"):
        FileStore(path)


def test_waiting_handle_sees_another_handles_write(tmp_path: Path) -> None:
    reader = FileStore(tmp_path / "s", timeout=timedelta(milliseconds=40))
    writer = FileStore(tmp_path / "s")
    writer.set("k", "v")
    assert reader.get("k") == b"v"
    reader.close()
    writer.close()
