"""Functions run in spawned processes by test_multiprocess.py (importable by the children)."""

from __future__ import annotations

from datetime import timedelta

from accord.store import FileStore, TCPStore

TIMEOUT = timedelta(seconds=30)


def add_over_tcp(port: int, world_size: int, times: int) -> None:
    with TCPStore("127.0.0.1", port, world_size=world_size, timeout=TIMEOUT) as store:
        for _ in range(times):
            store.add("total", 1)
        store.barrier("done", world_size)


def add_over_file(path: str, world_size: int, times: int) -> None:
    store = FileStore(path, world_size, timeout=TIMEOUT)
    for _ in range(times):
        store.add("total", 1)
    store.barrier("done", world_size)
    assert store.add("total", 0) == world_size * times
    store.close()


def file_round(path: str, world_size: int, rank: int) -> None:
    """Each rank sets its key, waits for everyone's, then closes its handle."""
    store = FileStore(path, world_size, timeout=TIMEOUT)
    store.set(f"rank{rank}", str(rank))
    store.wait([f"rank{r}" for r in range(world_size)])
    store.close()
