"""When workers fail: the first-failure report, restarts, forwarded signals, no orphans."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from .running import SCRIPTS, catches, clean_env, kill_all, run_to_end, wait_gone

pytestmark = pytest.mark.multiprocess
ALLREDUCE = str(SCRIPTS / "allreduce.py")


def _root_cause(stderr: str) -> str:
    assert "Root Cause (first observed failure):" in stderr, stderr
    return stderr.split("Root Cause (first observed failure):", 1)[1]


def test_exception_report_names_rank_time_exit_code_and_traceback(tmp_path):
    job = run_to_end("--nproc-per-node", "3", "--log-dir", str(tmp_path), ALLREDUCE,
                     env=clean_env(FAIL_RANK="1"))
    assert job.proc.returncode == 1, (job.stdout[-2000:], job.stderr[-4000:])  # (once 0 under load)
    root = _root_cause(job.stderr)
    assert "rank      : 1 (local_rank: 1)" in root
    assert "exitcode  : 1 (pid: " in root
    assert re.search(r"time      : \d{4}-\d\d-\d\d_\d\d:\d\d:\d\d\.\d{3}", root)
    assert 'allreduce.py", line' in root and "in fail" in root
    assert "ValueError: rank 1 fails on purpose" in root
    assert "allreduce.py FAILED" in job.stderr
    assert "first failure: rank 1 (local_rank 1 on" in job.stderr
    # the traceback came through the error file, in torchrun's format, with no @record
    (error_file,) = tmp_path.glob("*/attempt_0/1/error.json")
    data = json.loads(error_file.read_text())
    assert data["message"]["message"] == "ValueError: rank 1 fails on purpose"
    assert data["message"]["extraInfo"]["py_callstack"].startswith("Traceback")
    assert f"error_file: {error_file}" in root
    # the worker's own stderr shows the user's frames only, as `python allreduce.py` would
    tb = [line for line in job.err if line.startswith("[rank1]: ")]
    assert tb[0] == "[rank1]: Traceback (most recent call last):"
    assert not any("worker.py" in line or "runpy" in line for line in tb)


@pytest.mark.parametrize("mode, code, words", [
    ("kill", -9, ["(SIGKILL)", "Signal 9 (SIGKILL) received by PID"]),
    ("exit3", 3, ["exit code 3, no Python exception"]),
])
def test_report_for_a_worker_that_dies_without_a_traceback(mode, code, words):
    job = run_to_end("--nproc-per-node", "2", ALLREDUCE, env=clean_env(FAIL_RANK="0",
                                                                       FAIL_MODE=mode))
    assert job.proc.returncode == 1
    root = _root_cause(job.stderr)
    assert "rank      : 0 (local_rank: 0)" in root
    assert f"exitcode  : {code} (pid: " in root and "error_file: <N/A>" in root
    for word in words:
        assert word in root


def test_no_python_failure_is_reported_without_traceback():
    job = run_to_end("--nproc-per-node", "2", "--no-python", "sh", "-c",
                     'test "$RANK" = 1 && exit 5; exit 0')
    assert job.proc.returncode == 1
    root = _root_cause(job.stderr)
    assert "rank      : 1 (local_rank: 1)" in root and "exitcode  : 5" in root
    assert "--no-python" in root


def test_restart_after_a_failure_then_success():
    job = run_to_end("--nproc-per-node", "2", "--max-restarts", "2", ALLREDUCE,
                     env=clean_env(FAIL_RANK="1"))
    assert job.proc.returncode == 0, job.stderr
    assert "attempt 0 failed: rank 1 (local_rank 1 on" in job.stderr
    assert "ValueError: rank 1 fails on purpose. Restarting every worker (restart 1 of 2)" \
        in job.stderr
    for rank in (0, 1):
        assert f"[rank{rank}]: RESULT rank={rank} size=2 attempt=1 sum=[1, 3, 5, 7]" in job.out


def test_root_cause_is_the_rank_that_raised_even_when_its_peer_exits_first():
    # rank 1 raises and takes a second to exit; rank 0 hears of it in a barrier and exits first
    job = run_to_end("--nproc-per-node", "2", ALLREDUCE,
                     env=clean_env(FAIL_RANK="1", FAIL_MODE="slow"))
    assert job.proc.returncode == 1
    root = _root_cause(job.stderr)
    assert "rank      : 1 (local_rank: 1)" in root, root
    assert "ValueError: rank 1 fails on purpose" in root
    assert "first failure: rank 1 (local_rank 1 on" in job.stderr
    assert "PeerError" in job.stderr  # rank 0's failure is still reported, as a consequence


def _pids(job, count: int) -> list[int]:
    job.wait_for(lambda: sum("PIDS" in line for line in job.out) == count, 30, "worker pids")
    return [int(p) for line in job.out if "PIDS" in line for p in line.split("PIDS ")[1].split()]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_launcher_reaches_every_worker(launch, sig):
    job = launch("--nproc-per-node", "2", str(SCRIPTS / "hang.py"))
    pids = _pids(job, 2)
    try:
        job.proc.send_signal(sig)
        assert job.finish(30) == 1
        assert wait_gone(pids, 10) == [], "workers or their children survived"
        assert f"interrupted by {sig.name}" in job.stderr
    finally:
        kill_all(pids)


def test_no_orphan_survives_a_sigkilled_launcher(launch):
    job = launch("--nproc-per-node", "2", str(SCRIPTS / "hang.py"))
    pids = _pids(job, 2)  # two workers and the `sleep` each of them started
    try:
        job.proc.kill()  # SIGKILL: the launcher can do nothing about it
        job.proc.wait(timeout=10)
        assert wait_gone(pids, 10) == [], "workers or their children outlived the launcher"
    finally:
        kill_all(pids)


def test_signal_during_rendezvous_stops_the_launcher(launch):
    job = launch("--nnodes", "2", "--node-rank", "0", "--master-port", "0",
                 "--rdzv-backend", "static", str(SCRIPTS / "env_dump.py"))
    job.wait_for(lambda: catches(job.proc.pid, signal.SIGTERM), 30, "SIGTERM handler")
    time.sleep(0.3)  # now waiting for node 1, which never comes
    job.proc.send_signal(signal.SIGTERM)
    assert job.finish(15) == 1
    assert "stopped by SIGTERM" in job.stderr


def test_rendezvous_timeout_names_the_missing_nodes():
    job = run_to_end("--nnodes", "3", "--node-rank", "0", "--master-port", "0",
                     "--rdzv-conf", "join_timeout=1", str(SCRIPTS / "env_dump.py"))
    assert job.proc.returncode == 1
    assert "node ranks [1, 2] of 3 never joined" in job.stderr
