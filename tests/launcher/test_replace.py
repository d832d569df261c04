"""accordrun --replace-workers: a worker that dies is replaced in its place while the others go
on (they take the newcomer in with grow_group); without the option, nothing changed."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from .running import SCRIPTS, Launched, clean_env

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]
RECOVERY, TORCH_RECOVERY = str(SCRIPTS / "recovery.py"), str(SCRIPTS / "torch_recovery.py")


def _lines(job: Launched, kind: str) -> list[dict[str, str]]:
    """The ``KIND key=value …`` lines the workers printed (recovery.py's)."""
    found = []
    for line in list(job.out):
        match = re.match(rf"\[rank\d+\]: {kind} (.*)", line)
        if match:
            found.append(dict(item.split("=", 1) for item in match.group(1).split()))
    return found


def _pid_of(job: Launched, rank: int, workers: int = 4) -> int:
    job.wait_for(lambda: len(_lines(job, "TRAINING")) >= workers, 90, "every worker training")
    time.sleep(0.3)  # a few steps in
    (line,) = [t for t in _lines(job, "TRAINING") if t["rank"] == str(rank)]
    return int(line["pid"])


def _equal_parameters(job: Launched, restart: int, steps: int) -> None:
    params = _lines(job, "PARAMS")
    assert sorted(int(p["rank"]) for p in params) == [0, 1, 2, 3], job.stdout
    assert all(p["same"] == "1" and p["steps"] == str(steps) for p in params), params
    assert len({p["digest"] for p in params}) == 1, params
    assert {p["restart"] for p in params} == {str(restart)}, params


def test_a_killed_worker_is_replaced_and_the_others_go_on(launch):
    """Rank 0 (whose process hosts nothing: the store is accordrun's) is SIGKILLed mid-
    training; a replacement joins, the survivors never restart, every rank ends with the
    same parameters, and the replacement counted as a restart."""
    job = launch("--nproc-per-node", "4", "--replace-workers", "--max-restarts", "2", RECOVERY,
                 env=clean_env(STEPS="1500"))
    victim = _pid_of(job, 0)
    survivors = {int(t["pid"]) for t in _lines(job, "TRAINING")} - {victim}
    killed = time.time()
    os.kill(victim, signal.SIGKILL)
    job.wait_for(lambda: len(_lines(job, "GROWN")) == 3, 60, "the survivors' grow_group")
    assert job.finish(120) == 0, job.stderr
    _equal_parameters(job, restart=0, steps=1500)  # TORCHELASTIC_RESTART_COUNT: the attempt's
    assert re.search(r"accordrun: rank 0 \(local_rank 0 on .*\) was killed by SIGKILL: .* "
                     r"Starting a worker in its place \(pid \d+; restart 1 of 2\); the other "
                     r"workers go on\.", job.stderr), job.stderr
    assert "Restarting every worker" not in job.stderr
    training = _lines(job, "TRAINING")
    (newcomer,) = [t for t in training if t["joined"] == "1"]
    assert {int(t["pid"]) for t in training if t["joined"] == "0"} == survivors | {victim}
    grown = max(float(g["grown"]) for g in _lines(job, "GROWN"))
    print(f"\nkill -> replacement's script starts {float(newcomer['started']) - killed:.2f} s, "
          f"accord imported {float(newcomer['imported']) - killed:.2f} s, admitted "
          f"{float(newcomer['init']) - killed:.2f} s, every survivor's grow_group returned "
          f"{grown - killed:.2f} s")


def test_with_no_restart_left_the_job_fails_as_before(launch):
    job = launch("--nproc-per-node", "4", "--replace-workers", "--max-restarts", "0", RECOVERY,
                 env=clean_env(STEPS="100000"))
    victim = _pid_of(job, 2)
    os.kill(victim, signal.SIGKILL)
    assert job.finish(90) == 1
    assert "No restart is left to replace it (--max-restarts 0): every worker stops." in job.stderr
    root = job.stderr.split("Root Cause (first observed failure):", 1)[1]
    assert "rank      : 2 (local_rank: 2)" in root and f"exitcode  : -9 (pid: {victim}) (SIGKILL)" in root
    assert "failed after 0 restart(s) (--max-restarts 0)" in job.stderr
    assert "Starting a worker in its place" not in job.stderr and not _lines(job, "PARAMS")


def test_without_the_option_every_worker_restarts_as_before(launch):
    job = launch("--nproc-per-node", "4", "--max-restarts", "1", RECOVERY, env=clean_env(STEPS="1000"))
    os.kill(_pid_of(job, 1), signal.SIGKILL)
    assert job.finish(120) == 0, job.stderr
    assert re.search(r"attempt 0 failed: rank 1 \(local_rank 1 on .*\) was killed by SIGKILL: .* "
                     r"Restarting every worker \(restart 1 of 1\)\.", job.stderr), job.stderr
    assert "Starting a worker in its place" not in job.stderr and not _lines(job, "GROWN")
    assert [t["joined"] for t in _lines(job, "TRAINING")] == ["0"] * 8  # 4, then 4 again
    _equal_parameters(job, restart=1, steps=1000)


def test_a_program_without_the_recovery_loop_restarts_whole_counting_the_replacement(launch):
    """The survivors do not go on without the lost rank (their PeerError ends them): the
    replacement cannot be admitted, so every worker stops and the whole group restarts, the
    replacement counted (restart 2 of 2), the killed rank named as the cause."""
    job = launch("--nproc-per-node", "4", "--replace-workers", "--max-restarts", "2", RECOVERY,
                 env=clean_env(STEPS="800", NO_RECOVERY="1"))
    os.kill(_pid_of(job, 3), signal.SIGKILL)
    assert job.finish(120) == 0, job.stderr
    assert "restart 1 of 2); the other workers go on." in job.stderr
    assert re.search(r"accordrun: rank \d \(local_rank \d on .*\) failed because another rank did "
                     r"\(PeerError\): the program did not go on without that rank", job.stderr)
    assert re.search(r"attempt 0 failed: rank 3 \(local_rank 3 on .*\) was killed by SIGKILL: .* "
                     r"Restarting every worker \(restart 2 of 2\)\.", job.stderr), job.stderr
    _equal_parameters(job, restart=2, steps=800)


def test_a_worker_on_the_other_host_is_replaced_there(launch, two_hosts):
    """Two hosts (network namespaces), two workers each: a worker of host b dies, host b's
    accordrun replaces it, the replacement joins through the store on host a and the ranks
    of both hosts (over TCP), and both launchers end with the job's success."""
    a, b = two_hosts
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"{a.rdzv_addr}:29500", "--rdzv-conf", "join_timeout=60",
              "--replace-workers", "--max-restarts", "1", RECOVERY]
    job_a = launch(*common, prefix=a.prefix,
                   env=clean_env(ACCORD_SOCKET_IFNAME=a.data_if, STEPS="1500"))
    job_b = launch(*common, prefix=b.prefix,
                   env=clean_env(ACCORD_SOCKET_IFNAME=b.data_if, STEPS="1500"))
    job_b.wait_for(lambda: len(_lines(job_b, "TRAINING")) == 2, 90, "host b's workers training")
    victim = [t for t in _lines(job_b, "TRAINING")][1]
    job_a.wait_for(lambda: len(_lines(job_a, "TRAINING")) == 2, 90, "host a's workers training")
    time.sleep(0.3)
    os.kill(int(victim["pid"]), signal.SIGKILL)
    assert job_b.finish(120) == 0, job_b.stderr
    assert job_a.finish(60) == 0, job_a.stderr
    assert "restart 1 of 1); the other workers go on." in job_b.stderr
    assert "Starting a worker in its place" not in job_a.stderr
    params = _lines(job_a, "PARAMS") + _lines(job_b, "PARAMS")
    assert sorted(int(p["rank"]) for p in params) == [0, 1, 2, 3], params
    assert all(p["same"] == "1" and p["steps"] == "1500" for p in params), params
    assert len({p["digest"] for p in params}) == 1, params
    assert [t["joined"] for t in _lines(job_b, "TRAINING")] == ["0", "0", "1"]


@pytest.mark.torch
def test_a_torch_ddp_job_takes_its_replacement_in(launch, long_run):
    """The same through torch (backend accord, DDP): the replacement joins with
    accord.integrations.torch.join_process_group, the survivors shrink and grow with its
    twins, rebuild DDP, and every rank ends with the same parameters. Long (about 20 s, for
    torch's imports): CI covers the same library path in torch_backend/test_shrink.py and
    the launcher's in the NumPy test above."""
    if not long_run:
        pytest.skip("a long test (about 20 s): pytest --long")
    pytest.importorskip("torch")
    job = launch("--nproc-per-node", "3", "--replace-workers", "--max-restarts", "1", TORCH_RECOVERY,
                 env=clean_env(STEPS="1500"))
    os.kill(_pid_of(job, 1, workers=3), signal.SIGKILL)
    assert job.finish(150) == 0, job.stderr
    params = _lines(job, "PARAMS")
    assert sorted(p["rank"] for p in params) == ["0", "1", "2"], job.stdout
    assert all(p["same"] == "1" and p["steps"] == "1500" for p in params), params
    assert len(_lines(job, "GROWN")) == 2 and "restart 1 of 1); the other workers go on." in job.stderr
    assert [t["joined"] for t in _lines(job, "TRAINING")].count("1") == 1
