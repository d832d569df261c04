"""Diagnostics over the loopback transport: the flight recorder and its dumps, the merge
tool, comm_stats, the stuck report, the DETAIL argument check, debug levels, fail-fast.
(Real-process fault injection: tests/processes/test_fault_injection.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import accord as dist
from accord.diagnostics import debug, fail_fast, merge
from accord.group.calls import CallSequencer
from accord.group.recorder import FlightRecorder
from accord.transport.wire import Fingerprint
from accord.world import current_world
from harness import run_ranks


# -- the recorder ------------------------------------------------------------------------------
def test_the_recorder_keeps_the_last_calls_and_totals_per_operation():
    rec = FlightRecorder(capacity=3)
    calls = CallSequencer(30.0, "rank 0", rec)  # (the one writer of the recorder's call records)
    fp = Fingerprint(1, 0, 12, 256, -1)  # float32 (code 12), 256 elements
    for seq in range(1, 6):
        calls.end(calls.start(seq, "all_reduce", fp))
    failed = calls.start(6, "broadcast", fp._replace(root=1))
    calls.fail(failed, TimeoutError("too slow"), breaks=False)
    entries = rec.entries()
    assert [e["seq"] for e in entries] == [4, 5, 6]  # the ring forgot 1-3
    assert entries[-1]["state"] == "failed" and "too slow" in entries[-1]["error"]
    assert entries[0]["dtype"] == "float32" and entries[0]["nbytes"] == 1024
    stats = rec.stats()
    assert stats["all_reduce"]["calls"] == 5 and stats["all_reduce"]["bytes"] == 5 * 1024
    assert stats["broadcast"]["failed"] == 1
    progress = rec.progress()  # the failed call is where this rank stands
    assert progress["current"]["seq"] == 6 and progress["last_done"]["seq"] == 5


def test_comm_stats_and_an_on_demand_dump(tmp_path):
    def body(rank):
        x = np.ones(100, dtype=np.float64)
        for _ in range(3):
            dist.all_reduce(x)
        dist.broadcast(x, src=1)
        dist.barrier()
        path = dist.dump_flight_recorder(str(tmp_path / f"rank{rank}.json"))
        return dist.comm_stats(), path

    results = run_ranks(2, body)
    stats, path = results[0]
    ops = stats["0"]
    assert ops["all_reduce"]["calls"] == 3 and ops["all_reduce"]["bytes"] == 3 * 800
    assert ops["broadcast"]["calls"] == 1 and ops["barrier"]["calls"] == 1
    assert ops["all_reduce"]["total_s"] >= ops["all_reduce"]["max_s"] > 0
    data = json.loads(open(path).read())
    assert data["format"] == "accord-flight-recorder/1" and data["rank"] == 0
    entries = data["groups"][0]["entries"]
    assert [(e["seq"], e["op"], e["state"]) for e in entries] == [
        (1, "all_reduce", "completed"), (2, "all_reduce", "completed"),
        (3, "all_reduce", "completed"), (4, "broadcast", "completed"), (5, "barrier", "completed")]
    assert entries[3]["root"] == 1
    report = merge.render(merge.load([str(tmp_path)]))
    assert "no divergence" in report
    assert data["membership"] == [] and "membership changes" not in report  # (the job never changed)


def test_the_merged_report_says_how_a_changed_job_got_its_ranks() -> None:
    dumps = {r: _dump(r, [(1, "all_reduce", "completed", 4)], size=2) for r in range(2)}
    changes = [{"change": 1, "what": "shrink_group", "excluded": [1], "size": [3, 2], "rank": [2, 1]},
               {"change": 2, "what": "grow_group", "admitted": 1, "size": [2, 3], "rank": [1, 1]}]
    for d in dumps.values():
        d["membership"] = changes
    report = merge.render(dumps)
    assert "membership changes before this world (2):" in report, report
    assert "#1 shrink_group: ranks [1] excluded, world 3 -> 2" in report, report
    assert "#2 grow_group: 1 admitted, world 2 -> 3" in report, report


def _dump(rank, entries, size=3):
    return {"format": "accord-flight-recorder/1", "rank": rank, "world_size": size, "pid": 1,
            "host": "h", "time": 0, "reason": "test",
            "groups": [{"name": "0", "desc": "default_pg", "id": 0, "ranks": list(range(size)), "rank": rank,
                        "entries": [{"seq": s, "op": op, "state": st, "dtype": "float32",
                                     "count": n, "root": -1} for s, op, st, n in entries]}]}


def test_merge_finds_the_first_divergence(tmp_path, capsys):
    done = [(1, "all_reduce", "completed", 4), (2, "all_reduce", "completed", 4)]
    dumps = {0: _dump(0, done + [(3, "all_reduce", "started", 4)]),
             1: _dump(1, done + [(3, "all_reduce", "started", 4)]),
             2: _dump(2, done)}
    div = merge.analyse(dumps)[0]["divergence"]
    assert div["seq"] == 3 and div["kind"] == "not reached" and div["absent"] == [2]
    dumps[2] = _dump(2, done + [(3, "broadcast", "failed", 4)])
    div = merge.analyse(dumps)[0]["divergence"]
    assert div["seq"] == 3 and div["kind"] == "mismatch"
    for rank, data in dumps.items():
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(data))
    assert merge.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "first divergence at #3: mismatch" in out and "rank 2: broadcast #3" in out
    (tmp_path / "rank9.json").write_text("{}")
    assert merge.main([str(tmp_path)]) == 2  # not a dump: said, not a traceback


# -- the stuck report ---------------------------------------------------------------------------
def test_a_timeout_says_who_has_not_reached_the_call_and_what_it_did_last(monkeypatch):
    monkeypatch.setenv("ACCORD_PROGRESS_INTERVAL", "0.1")
    release = threading.Event()

    def body(rank):
        x = np.ones(4, dtype=np.float32)
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
        if rank == 2:  # busy elsewhere: never calls the next all_reduce in time
            release.wait(10)
            return None
        try:
            dist.all_reduce(x)
        except (dist.DistTimeoutError, dist.PeerError) as exc:
            return type(exc).__name__, str(exc)
        finally:
            if rank == 0:
                release.set()
        return None

    results = run_ranks(3, body, timeout=1.5, expect_failure=True)
    # the first rank to time out tells the other (POISON), whose PeerError quotes its report
    assert "DistTimeoutError" in {r[0] for r in results[:2]}, results
    for _, text in results[:2]:
        assert "Stuck report for all_reduce #3" in text, text
        assert "not reached: rank 2" in text, text
        assert "rank 2: not in a collective of this group: its last one, broadcast #2" in text, text


def test_the_first_timeout_already_has_every_live_ranks_post(monkeypatch):
    """No interval set (0.5 s), a 1 s timeout, a laggard busy since the job started: the board
    looks every quarter of the timeout and posts a group on first sight, so the report knows
    where the laggard is instead of 'posted nothing'."""
    monkeypatch.delenv("ACCORD_PROGRESS_INTERVAL", raising=False)
    release = threading.Event()

    def body(rank):
        if rank == 2:  # busy from the start: never calls a collective in time
            release.wait(10)
            return None
        try:
            dist.all_reduce(np.ones(4, dtype=np.float32))
        except (dist.DistTimeoutError, dist.PeerError) as exc:
            return str(exc)
        finally:
            if rank == 0:
                release.set()
        return None

    texts = run_ranks(3, body, timeout=1.0, expect_failure=True)[:2]
    report = next(t for t in texts if "Stuck report" in t)
    assert "not reached: rank 2" in report, report
    assert "rank 2: has not started a collective on this group yet" in report, report
    assert "posted nothing" not in report, report
    first_line = report.splitlines()[0]
    assert "Did not reach this call: rank 2 (stuck report below)." in first_line, report


# -- debug levels and the DETAIL check ----------------------------------------------------------
@pytest.fixture
def detail_level():
    before = debug.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    yield
    dist.set_debug_level(before)


def test_debug_level_from_the_environment(monkeypatch):
    before = debug.get_debug_level()
    try:
        monkeypatch.delenv("ACCORD_DEBUG", raising=False)
        monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "detail")
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() == dist.DebugLevel.DETAIL
        monkeypatch.setenv("ACCORD_DEBUG", "INFO")  # accord's own name wins
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() is dist.DebugLevel.INFO
        monkeypatch.setenv("ACCORD_DEBUG", "LOUD")
        with pytest.raises(ValueError, match="ACCORD_DEBUG.*OFF, INFO or DETAIL"):
            dist.set_debug_level_from_env()
        dist.set_debug_level("off")
        assert dist.get_debug_level() == dist.DebugLevel.OFF
        with pytest.raises(ValueError):
            dist.set_debug_level(7)
    finally:
        dist.set_debug_level(before)


def test_detail_names_each_side_of_a_shape_mismatch_and_the_group_stays_usable(detail_level):
    def body(rank):
        x = np.ones(10 if rank == 0 else 20, dtype=np.float32)
        with pytest.raises(dist.CollectiveMismatchError) as info:
            dist.all_reduce(x)
        y = np.full(3, rank, dtype=np.int64)
        dist.all_reduce(y)  # nothing was sent: the next call works
        return str(info.value), y.tolist()

    for text, y in run_ranks(2, body):
        assert "all_reduce #1" in text and "float32[10] on rank 0; float32[20] on rank 1" in text
        assert y == [1, 1, 1]


def test_detail_checks_roots_ops_and_pairwise_sizes(detail_level):
    def body(rank):
        seen = []
        x = np.ones(4, dtype=np.float32)
        for call in (lambda: dist.broadcast(x, src=rank),  # different roots
                     lambda: dist.all_reduce(x, op=dist.ReduceOp.MAX if rank else dist.ReduceOp.SUM),
                     lambda: dist.all_to_all_single(np.zeros(3), np.zeros(3),
                                                    [1, 2] if rank == 0 else [2, 1], [1, 2])):
            with pytest.raises(dist.CollectiveMismatchError) as info:
                call()
            seen.append(str(info.value))
        # uneven but consistent: allowed
        outs = [np.zeros(1 + r, dtype=np.int32) for r in range(2)]
        dist.all_gather(outs, np.full(1 + rank, rank, dtype=np.int32))
        seen.append([o.tolist() for o in outs])
        return seen

    for roots, ops, splits, gathered in run_ranks(2, body):
        assert "the root: 0 on rank 0; 1 on rank 1" in roots
        assert "op: SUM on rank 0; MAX on rank 1" in ops
        assert "rank 1 sends 1 elements to rank 0, which expects 2 from it" in splits
        assert gathered == [[0], [1, 1]]


# -- fail-fast -----------------------------------------------------------------------------------
def test_an_uncaught_exception_is_told_to_the_peers_at_once(monkeypatch):
    fail_fast.install(current_world)
    monkeypatch.setattr(sys, "stderr", open(os.devnull, "w"))  # the chained hook's traceback

    def body(rank):
        x = np.ones(2)
        dist.all_reduce(x)
        if rank == 1:
            try:
                raise ValueError("bad batch")
            except ValueError as exc:  # what the interpreter does with an uncaught one
                sys.excepthook(type(exc), exc, exc.__traceback__)
            return None
        start = time.monotonic()
        with pytest.raises(dist.PeerError) as info:
            dist.all_reduce(x)
        return str(info.value), time.monotonic() - start

    text, took = run_ranks(2, body, timeout=30, expect_failure=True)[0]
    assert "rank 1 raised ValueError: bad batch (uncaught, at test_diagnostics.py" in text
    assert took < 5


# -- SIGUSR1 (a real process) --------------------------------------------------------------------
def test_sigusr1_dumps_the_flight_recorder(tmp_path):
    script = (
        "import os, signal, time, numpy as np, accord as dist\n"
        "dist.init_process_group(init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "dist.all_reduce(np.ones(3))\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "time.sleep(0.2)\n"
        "dist.destroy_process_group()\n")
    env = dict(os.environ, ACCORD_FLIGHT_RECORDER_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert data["reason"] == "SIGUSR1"
    assert [e["op"] for e in data["groups"][0]["entries"]] == ["all_reduce"]


def test_monitored_barrier_adds_the_stuck_report(monkeypatch):
    monkeypatch.setenv("ACCORD_PROGRESS_INTERVAL", "0.1")
    release = threading.Event()

    def body(rank):
        dist.barrier()
        if rank == 2:
            release.wait(10)
            return None
        try:
            dist.monitored_barrier(timeout=1.0)
        except (dist.DistTimeoutError, dist.PeerError) as exc:
            return str(exc)
        finally:
            if rank == 0:
                release.set()
        return None

    text = run_ranks(3, body, timeout=5, expect_failure=True)[0]
    assert "rank 2 failed to pass monitored_barrier" in text, text
    assert "Stuck report for monitored_barrier #2" in text and "not reached: rank 2" in text, text
    assert "its last one, barrier #1" in text, text


def test_comm_stats_count_point_to_point():
    def body(rank):
        x = np.arange(8, dtype=np.int32)
        if rank == 0:
            dist.send(x, dst=1)
            dist.isend(x, dst=1).wait()
        else:
            dist.recv(x, src=0)
            dist.irecv(x, src=0).wait()
        return dist.comm_stats()["0"]

    sender, receiver = run_ranks(2, body)
    assert sender["send"]["calls"] == 1 and sender["send"]["bytes"] == 32
    assert sender["isend"]["calls"] == 1 and sender["isend"]["bytes"] == 32
    assert receiver["recv"]["bytes"] == 32 and receiver["irecv"]["bytes"] == 32


@pytest.mark.parametrize("capacity", [1, 2, 4, 7])
def test_totals_survive_the_ring_lapping_many_times(capacity):
    rec = FlightRecorder(capacity=capacity)
    calls = CallSequencer(30.0, "rank 0", rec)
    fp = Fingerprint(1, 0, 8, 3, -1)  # int64 (code 8), 3 elements: 24 bytes
    for seq in range(1, 24):
        entry = calls.start(seq, "all_reduce" if seq % 3 else "barrier", fp if seq % 3 else None)
        if seq == 10:
            calls.fail(entry, RuntimeError("x"), breaks=False)
        else:
            calls.end(entry)
        if seq in (5, 17):
            assert rec.stats()["all_reduce"]["calls"] == seq - seq // 3  # reading changes nothing
    stats = rec.stats()
    assert stats["all_reduce"]["calls"] == 16 and stats["all_reduce"]["bytes"] == 16 * 24
    assert stats["barrier"]["calls"] == 7 and stats["all_reduce"]["failed"] == 1
