"""Joining a job: env://, tcp://, file:// and store=, re-initialising, world size 1, and the
errors a bad or incomplete start raises (named variable, named missing rank)."""

from __future__ import annotations

import os
import re
from datetime import timedelta

import numpy as np
import pytest

import accord as dist
from accord import TCPStore

from .procs import exercise, free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def _rounds(kind: str, tmp_path, count: int) -> list[dict]:
    if kind == "file":
        return [{"kind": kind, "path": str(tmp_path / f"rendezvous-{i}")} for i in range(count)]
    return [{"kind": kind, "port": free_port()} for _ in range(count)]


@pytest.mark.parametrize("kind, world_size", [("env", 3), ("tcp", 2), ("file", 2), ("store", 2)])
def test_init_run_collectives_destroy_and_init_again(start_job, tmp_path, kind, world_size) -> None:
    rounds = _rounds(kind, tmp_path, 2)
    job = start_job("collectives", world_size, rounds=rounds)
    for i in range(len(rounds)):
        reports = job.expect(f"round{i}", timeout=30)
        assert {r: rep.info for r, rep in reports.items()} == {
            r: {"rank": r, "size": world_size} for r in range(world_size)}
    job.set("release")
    job.expect("done", timeout=30)
    assert job.join(timeout=30) == {r: 0 for r in range(world_size)}
    if kind == "file":  # the last of world_size handles removed each rendezvous file
        assert not any(os.path.exists(spec["path"]) for spec in rounds)


@pytest.mark.parametrize("kind", ["env", "tcp"])
def test_init_again_on_the_same_port(start_job, kind) -> None:
    """destroy, then init again at once on the same MASTER_PORT: a rank that starts over
    sooner than rank 0 (whose process runs the store) may reach rank 0's old server, still
    retiring; it serves on for the new world instead of closing under that rank (before, half
    of such runs failed with "lost the connection to the server")."""
    port = free_port()
    rounds = [{"kind": kind, "port": port}] * 4
    job = start_job("collectives", 2, rounds=rounds)
    for i in range(len(rounds)):
        reports = job.expect(f"round{i}", timeout=30)
        assert {r: rep.info for r, rep in reports.items()} == {r: {"rank": r, "size": 2} for r in range(2)}
    job.set("release")
    job.expect("done", timeout=30)
    assert job.join(timeout=30) == {0: 0, 1: 0}


def test_a_world_of_one_over_tcp() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, timeout=timedelta(seconds=30))
    try:
        exercise(0, 1)
        x = np.arange(5, dtype=np.float64)
        dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
        assert x.tolist() == [0, 1, 2, 3, 4]
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_a_world_of_one_over_env(monkeypatch) -> None:
    _env(monkeypatch)
    dist.init_process_group()
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
        exercise(0, 1)
    finally:
        dist.destroy_process_group()


def _env(monkeypatch, **values: str | None) -> None:
    """Set the env:// contract (defaults: a local master on a free port) in this process
    only; monkeypatch restores os.environ afterwards. A value of None unsets the variable."""
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    full = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0",
            "WORLD_SIZE": "1", **values}
    for name, value in full.items():
        if value is not None:
            monkeypatch.setenv(name, value)


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"])
def test_env_missing_variable_is_named(monkeypatch, missing) -> None:
    _env(monkeypatch, **{missing: None})
    with pytest.raises(ValueError, match=missing):
        dist.init_process_group(timeout=timedelta(seconds=5))
    assert not dist.is_initialized()


@pytest.mark.parametrize("bad", ["MASTER_PORT", "RANK", "WORLD_SIZE"])
def test_env_malformed_variable_is_named(monkeypatch, bad) -> None:
    _env(monkeypatch, **{bad: "abc"})
    with pytest.raises(ValueError, match=rf"{bad}.*'abc'"):
        dist.init_process_group(timeout=timedelta(seconds=5))
    assert not dist.is_initialized()


@pytest.mark.parametrize("rank, size", [("1", "1"), ("-1", "2"), ("0", "0")])
def test_env_rank_outside_the_world(monkeypatch, rank, size) -> None:
    _env(monkeypatch, RANK=rank, WORLD_SIZE=size)
    with pytest.raises(ValueError, match="rank"):
        dist.init_process_group(timeout=timedelta(seconds=5))
    assert not dist.is_initialized()


def test_tcp_without_rank_or_with_store_is_refused() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ValueError, match="rank"):
        dist.init_process_group(init_method=url, world_size=1)
    with pytest.raises(ValueError, match="world size"):
        dist.init_process_group(init_method=url, rank=0)
    store = TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=5))
    try:
        with pytest.raises(ValueError, match="mutually exclusive"):
            dist.init_process_group(init_method=url, store=store, rank=0, world_size=1)
        with pytest.raises(ValueError, match="rank"):
            dist.init_process_group(store=store)
    finally:
        store.close()
    assert not dist.is_initialized()


def test_init_twice_raises_and_leaves_the_first_world_working() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group(init_method=url, rank=0, world_size=1, timeout=timedelta(seconds=30))
    try:
        with pytest.raises(ValueError, match="twice"):
            dist.init_process_group(init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                    world_size=1)
        x = np.ones(3)
        dist.all_reduce(x)
        assert x.tolist() == [1, 1, 1]
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["tcp", "env"])
def test_a_rank_that_never_starts_is_named_in_the_timeout(start_job, kind) -> None:
    """Rank 2 of 3 never starts: ranks 0 and 1 raise DistTimeoutError naming it.

    Rank 0 hosts the TCPStore, so it is always the first to give up (nobody can start the
    clock before its store is up) and its store goes down with its failed init. Rank 1, still
    waiting then, must get rank 0's verdict, not a lost store connection."""
    spec = {"kind": kind, "port": free_port(), "timeout": 2.0}
    job = start_job("init_only", 3, ranks=[0, 1], spec=spec, delays={1: 0.5})
    reports = job.expect("init", timeout=30)
    _assert_verdict(reports, "2 s")
    assert 1.9 <= reports[0].info["elapsed"] < 8, reports[0]  # rank 0 waited its full 2 s
    assert reports[1].message.startswith("rank 1: rank 0 gave up waiting"), reports[1]
    assert reports[1].info["elapsed"] < 8, reports[1]


def test_a_rank_arriving_after_the_verdict_gets_it_at_once(start_job, tmp_path) -> None:
    """file:// (the store outlives the ranks that gave up): rank 2 arrives after ranks 0 and 1
    gave up on it, and fails at once with their verdict instead of waiting in vain."""
    spec = {"kind": "file", "path": str(tmp_path / "rendezvous"), "timeout": 2.0}
    job = start_job("init_only", 3, spec=spec, delays={1: 0.3, 2: 3.0})
    reports = job.expect("init", timeout=30)
    _assert_verdict(reports, "2 s")
    assert reports[2].info["elapsed"] < 1, reports[2]


def _assert_verdict(reports: dict, budget: str) -> None:
    for rank, report in sorted(reports.items()):
        assert report.type_name == "DistTimeoutError", report
        assert re.search(rf"\branks \[2\] of 3 did not join within {budget}", report.message), \
            report
        assert re.match(rf"rank {rank}: (rank [01] gave up waiting: )?ranks", report.message), \
            report
