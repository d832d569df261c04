"""``accord top`` on a live job: a 4-rank job under accordrun where rank 2 sleeps before the
second all_reduce. The view, attached through accordrun's job file (store address and the
job's secret), shows rank 2 behind, names the call the others wait in and for how long; a
wrong secret and an address without a job are clear errors within seconds, not hangs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from accord.rendezvous import job_files

from .running import SCRIPTS, clean_env, free_port

pytestmark = pytest.mark.multiprocess

LAGGARD = str(SCRIPTS / "laggard.py")


def _top(*args: str, env: dict[str, str], timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accord.cli", "top", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _wait_for_view(env: dict[str, str], behind: list[int], waiting: list[int], timeout: float = 30.0):
    """Run ``top --once --json`` until the default group shows ``behind`` behind and
    ``waiting`` in the call; that group's JSON."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        done = _top("--once", "--json", env=env)
        assert done.returncode == 0, done.stderr
        last = json.loads(done.stdout)
        groups = [g for g in last["groups"] if g["id"] == 0]
        if groups and groups[0]["states"].get("behind") == behind \
                and groups[0]["states"].get("waiting") == waiting:
            return groups[0]
        time.sleep(0.2)
    raise AssertionError(f"top never showed ranks {behind} behind within {timeout} s; last: {last}")


def _start(launch, tmp_path, world: int, slow: int, **extra: str):
    env = clean_env(ACCORD_JOBS_DIR=str(tmp_path / "jobs"), SLOW_RANK=str(slow), SLEEP="90", **extra)
    env.pop("ACCORD_SECRET", None)
    env.pop("ACCORD_SECRET_FILE", None)  # accordrun makes the job's secret
    job = launch("--nproc-per-node", str(world), LAGGARD, env=env)
    job.wait_for(lambda: job.stdout.count("READY") == world, 90, "every rank's READY line")
    return job, env


def test_top_shows_the_rank_behind_an_all_reduce_and_how_long_the_others_wait(launch, tmp_path):
    job, env = _start(launch, tmp_path, 4, slow=2)
    [found] = [f for f in os.listdir(tmp_path / "jobs") if f.endswith(".json")]
    mode = os.stat(tmp_path / "jobs" / found).st_mode
    assert stat.S_IMODE(mode) == 0o600  # it holds the job's secret

    group = _wait_for_view(env, behind=[2], waiting=[0, 1, 3])
    assert group["call"]["op"] == "all_reduce" and group["call"]["seq"] == 2, group["call"]
    assert group["call"]["waiting_s"] >= 0
    assert "all_reduce #1" in group["ranks"]["2"]["doing"]  # what the laggard did last
    assert group["ranks"]["0"]["doing"].startswith("in all_reduce #2")

    time.sleep(1.0)  # the wait grows while the job is stuck, without new posts
    text = _top("--once", env=env)
    assert text.returncode == 0, text.stderr
    summary = next(line for line in text.stdout.splitlines() if line.startswith("group 0 (default_pg)"))
    assert "ranks 0, 1, 3 wait in all_reduce #2 (float32, 4 elements) for" in summary, text.stdout
    assert "BEHIND (not in it yet): rank 2 (last done: all_reduce #1" in summary, text.stdout
    seconds = float(summary.split(" for ")[1].split(" s;")[0])
    assert seconds >= 1.0, summary
    row = next(line for line in text.stdout.splitlines() if line.split()[:2] == ["2", "BEHIND"])
    assert "its last one, all_reduce #1" in row, text.stdout

    # attaching by address: the job's secret is required, and a wrong one is said so at once
    address = json.loads((tmp_path / "jobs" / found).read_text())
    store = f"{address['store_host']}:{address['store_port']}"
    stranger = dict(env, ACCORD_JOBS_DIR=str(tmp_path / "none"))
    started = time.monotonic()
    wrong = _top("--once", "--store", store, env=dict(stranger, ACCORD_SECRET="a guess"))
    assert wrong.returncode == 1 and "its secret differs" in wrong.stderr, wrong.stderr
    without = _top("--once", "--store", store, env=stranger)
    assert without.returncode == 1 and "requires the job's secret" in without.stderr, without.stderr
    assert time.monotonic() - started < 15
    assert "Traceback" not in wrong.stderr + without.stderr

    # the live view refreshes until the job's store goes away, then says so and ends (each
    # read gives up after --timeout: 1 s instead of the default 3 once the store is gone)
    live = subprocess.Popen([sys.executable, "-m", "accord.cli", "top", "--interval", "0.3",
                             "--timeout", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = live.stdout.readline()  # the first snapshot is out (pytest-timeout bounds this)
    assert first.startswith("accord top  store"), first + live.stderr.read()
    lines = [first]
    while sum(line.startswith("accord top  store") for line in lines) < 2:  # a refresh is out
        lines.append(live.stdout.readline())
        if not lines[-1]:
            break
    job.kill()  # SIGKILL: the launcher cannot remove its job file; the next reader does
    out, err = live.communicate(timeout=30)
    out = "".join(lines) + out
    assert live.returncode == 0, err
    assert out.count("accord top  store") >= 2 and "BEHIND" in out, out
    assert "the job's store is gone (the job ended?)" in out, out
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCORD_JOBS_DIR", str(tmp_path / "jobs"))
        assert job_files.running() == []
    assert not [f for f in os.listdir(tmp_path / "jobs") if f.endswith(".json")]


def test_top_without_a_job_at_the_address_says_so_within_seconds():
    env = clean_env(ACCORD_JOBS_DIR="off")
    started = time.monotonic()
    done = _top("--once", "--store", f"127.0.0.1:{free_port()}", "--timeout", "1", env=env)
    assert done.returncode == 1
    assert "could not reach the store within 1 s" in done.stderr, done.stderr
    assert time.monotonic() - started < 10
    nothing = _top("--once", env=env)
    assert nothing.returncode == 1 and "no running job found" in nothing.stderr, nothing.stderr


def test_top_shows_a_torch_backend_job_behind(launch, tmp_path):
    pytest.importorskip("torch")
    job, env = _start(launch, tmp_path, 2, slow=1, TORCH="1")
    group = _wait_for_view(env, behind=[1], waiting=[0])
    assert group["call"]["op"] == "all_reduce" and group["call"]["seq"] == 2, group["call"]
    assert "all_reduce #1" in group["ranks"]["1"]["doing"]
    job.kill()
