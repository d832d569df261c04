"""Stores shared by real processes (started with "spawn"): exact counters and file cleanup."""

from __future__ import annotations

import multiprocessing
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest

from accord.store import FileStore, TCPStore

from . import _mp_workers

pytestmark = pytest.mark.multiprocess

WORLD, TIMES = 4, 50


def _start(target, args_per_rank: list[tuple]) -> list:
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=target, args=args) for args in args_per_rank]
    for proc in procs:
        proc.start()
    return procs


def _join(procs: list) -> None:
    for proc in procs:
        proc.join(60)
    codes = [proc.exitcode for proc in procs]
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    assert codes == [0] * len(procs)


def _run_all(target, args_per_rank: list[tuple]) -> None:
    _join(_start(target, args_per_rank))


def test_concurrent_adds_over_tcp_are_exact() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    procs = _start(_mp_workers.add_over_tcp, [(port, WORLD + 1, TIMES)] * WORLD)
    try:
        # waits for the WORLD workers (and itself) to join, then serves their adds
        master = TCPStore("127.0.0.1", port, world_size=WORLD + 1, is_master=True,
                          timeout=timedelta(seconds=30), master_listen_fd=listener.detach())
        master.barrier("done", WORLD + 1)
        assert master.add("total", 0) == WORLD * TIMES
    finally:
        _join(procs)
    master.close()


def test_concurrent_adds_over_a_file_are_exact_and_the_file_is_removed(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    _run_all(_mp_workers.add_over_file, [(path, WORLD, TIMES)] * WORLD)
    assert not os.path.exists(path)


def test_file_removed_after_the_last_of_world_size_handles(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    mine = FileStore(path, WORLD + 1, timeout=timedelta(seconds=30))
    mine.set(f"rank{WORLD}", "main")
    _run_all(_mp_workers.file_round, [(path, WORLD + 1, rank) for rank in range(WORLD)])
    assert os.path.exists(path)  # this process still holds a seat
    assert mine.num_keys() == WORLD + 1  # the seats are not keys
    mine.close()
    assert not os.path.exists(path)
