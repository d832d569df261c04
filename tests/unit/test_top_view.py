"""What ``accord top`` makes of progress posts (no job needed), and the job files it finds
jobs by. The live job is tests/launcher/test_top.py's."""

from __future__ import annotations

import json
import os
import stat

from accord.diagnostics import job_view, top, top_view
from accord.rendezvous import job_files
from accord.store import HashStore

NOW = 1000.0


def _call(seq: int, start: float, end: float | None = None, state: str = "started") -> dict:
    return {"seq": seq, "op": "all_reduce", "state": state, "start": start, "end": end,
            "dtype": "float32", "count": 4}


def _post(current=None, done=None, t=NOW - 1, **extra) -> dict:
    return {"current": current, "last_done": done, "t": t, "pid": 7, "host": "h", "group": "default_pg",
            "size": 4, **extra}


def test_ranks_that_have_not_reached_the_call_the_others_wait_in_are_behind():
    posts = {0: _post(_call(5, NOW - 4)), 1: _post(_call(5, NOW - 3)),
             3: _post(None, _call(4, NOW - 9, NOW - 8, "completed"))}  # rank 2 never posted
    view = job_view.analyse("accord/0", 0, posts, NOW)
    assert view.call["seq"] == 5 and view.call["start"] == NOW - 4  # the first waiter's start
    assert view.ranks_in("waiting") == [0, 1]
    assert view.ranks_in("behind") == [3]
    assert view.ranks_in("silent") == [2]
    summary = top_view.summary(view, NOW)
    assert summary.startswith("ranks 0, 1 wait in all_reduce #5 (float32, 4 elements) for 4.0 s")
    assert "BEHIND (not in it yet): rank 3 (last done: all_reduce #4" in summary
    assert "no post from rank 2" in summary
    lines = top_view.group_lines(view, NOW)
    assert any(line.split()[:2] == ["2", "silent"] for line in lines), lines


def test_a_group_where_every_rank_is_in_the_call_has_nobody_behind():
    posts = {r: _post(_call(2, NOW - 1.5), size=2) for r in range(2)}
    view = job_view.analyse("w", 0, posts, NOW)
    assert view.ranks_in("behind") == [] and view.ranks_in("waiting") == [0, 1]
    assert top_view.summary(view, NOW) == "every rank is in all_reduce #2 (float32, 4 elements) for 1.5 s"


def test_a_failed_call_and_an_idle_group_are_named():
    failed = dict(_call(3, NOW - 2, NOW - 1, "failed"), error="DistTimeoutError: …")
    posts = {4: _post(failed, ranks=[4, 6], size=2), 6: _post(None, _call(3, NOW - 2, NOW - 1.9, "completed"),
                                                               ranks=[4, 6], size=2)}
    view = job_view.analyse("w", 3, posts, NOW)  # a subgroup: its members are global ranks 4 and 6
    assert [row.rank for row in view.rows] == [4, 6]
    assert view.call is None and view.ranks_in("failed") == [4] and view.ranks_in("idle") == [6]
    assert "FAILED: rank 4" in top_view.summary(view, NOW)


def test_a_snapshot_reads_every_post_under_any_prefix_and_shows_the_newest_world():
    store = HashStore()
    for rank in range(2):
        store.set(f"/worker/attempt_1/accord/0/progress/0/{rank}", json.dumps(_post(_call(9, NOW - 1), t=NOW)))
        store.set(f"/worker/attempt_0/accord/0/progress/0/{rank}", json.dumps(_post(_call(1, 0), t=1.0)))
    store.set("accord/0/progress/notapost", "x")
    snap = job_view.read_snapshot(store, "here:1")
    assert [g.world for g in snap.groups] == ["/worker/attempt_1/accord/0"] and snap.other_worlds == 1
    assert json.loads(top_view.as_json(snap))["groups"][0]["call"]["seq"] == 9
    assert len(job_view.read_snapshot(store, "here:1", every_world=True).groups) == 2


def test_addresses_parse_and_bad_ones_say_what_is_expected():
    assert top.parse_address("node3:29500") == ("node3", 29500)
    assert top.parse_address("[::1]:29500") == ("::1", 29500)
    for bad in ("29500", "host:", "host:port"):
        try:
            top.parse_address(bad)
        except ValueError as exc:
            assert "HOST:PORT" in str(exc)
        else:
            raise AssertionError(bad)


def test_job_files_are_private_and_a_dead_launchers_file_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCORD_JOBS_DIR", str(tmp_path / "jobs"))
    mine = job_files.JobFile("run-a", os.getpid(), os.uname().nodename, "127.0.0.1", 123, 0, "s3cret", 2.0)
    path = job_files.write(mine)
    assert path is not None and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "jobs").st_mode) == 0o700
    dead = job_files.JobFile("run-b", 2**22 + 12345, mine.host, "127.0.0.1", 124, 1, None, 3.0)
    job_files.write(dead)
    assert job_files.running() == [mine]  # run-b's launcher is not running: its file is gone
    assert not os.path.exists(job_files.path_of("run-b", dead.pid))
    target = top.find_target(None, None)
    assert (target.address, target.secret) == ("127.0.0.1:123", "s3cret")
    job_files.remove("run-a", pid=os.getpid() + 1)  # not its writer: kept
    assert job_files.running() == [mine]
    job_files.remove("run-a", pid=os.getpid())
    assert job_files.running() == []
    monkeypatch.setenv("ACCORD_JOBS_DIR", "off")
    assert job_files.write(mine) is None and job_files.running() == []


def test_the_launchers_of_one_job_on_one_host_keep_a_file_each(tmp_path, monkeypatch):
    """Two launchers of one run id here (``--nnodes 2``, both on this host): the job is listed
    once, from its latest attempt, and stays found when the first launcher ends."""
    monkeypatch.setenv("ACCORD_JOBS_DIR", str(tmp_path / "jobs"))
    here = os.uname().nodename
    first = job_files.JobFile("run-a", os.getpid(), here, "127.0.0.1", 123, 0, None, 1.0)
    other = job_files.JobFile("run-a", os.getppid(), here, "127.0.0.1", 125, 1, None, 2.0)  # (alive)
    job_files.write(first)
    job_files.write(other)
    assert job_files.running() == [other]  # one job, its latest attempt's store
    assert top.find_target(None, "run-a").address == "127.0.0.1:125"
    job_files.remove("run-a", other.pid)  # that launcher ends: the other's file stays
    assert job_files.running() == [first]
    assert top.find_target(None, None).address == "127.0.0.1:123"
