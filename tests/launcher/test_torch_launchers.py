"""Either launcher, either program: torchrun runs accord programs and accordrun runs torch
programs (gloo, DDP), with no extra setting — their stores speak one protocol. One node and two
namespaced "hosts", restarts included.

The two-host restarts run only with ACCORD_LONG_TESTS=1 (they take a minute).
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from .running import SCRIPTS, Launched, accordrun, clean_env, run_to_end

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

ALLREDUCE, TWOHOST = str(SCRIPTS / "allreduce.py"), str(SCRIPTS / "twohost.py")
TORCH_ALLREDUCE, TORCH_DDP = str(SCRIPTS / "torch_allreduce.py"), str(SCRIPTS / "torch_ddp.py")
long_test = pytest.mark.skipif(os.environ.get("ACCORD_LONG_TESTS") != "1",
                               reason="a long test: set ACCORD_LONG_TESTS=1")


def torchrun(*args: str, prefix: list[str] | None = None,
             env: dict[str, str] | None = None) -> Launched:
    return Launched([*(prefix or []), sys.executable, "-m", "torch.distributed.run", *args],
                    env or clean_env())


def _lines(job: Launched, tag: str) -> list[str]:
    """Every ``TAG …`` record in the output, without launcher prefixes (torchrun's workers
    may write two records on one line)."""
    return sorted(re.findall(rf"{tag} [^\n]*?(?=(?:{tag} |$))", job.stdout, re.M))


def _finished(job: Launched, timeout: float = 90) -> Launched:
    assert job.finish(timeout) == 0, f"{job.command}\nstdout:\n{job.stdout}\nstderr:\n{job.stderr}"
    return job


# -- one node -------------------------------------------------------------------------------------
def test_torchrun_runs_an_accord_program_as_accordrun_does():
    under_torchrun = _finished(torchrun("--standalone", "--nproc-per-node", "2", ALLREDUCE))
    under_accordrun = run_to_end("--standalone", "--nproc-per-node", "2", ALLREDUCE)
    expected = [f"RESULT rank={r} size=2 attempt=0 sum=[1, 3, 5, 7]" for r in (0, 1)]
    assert _lines(under_torchrun, "RESULT") == _lines(under_accordrun, "RESULT") == expected


def test_torchrun_restarts_an_accord_program():
    job = _finished(torchrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                             ALLREDUCE, env=clean_env(FAIL_RANK="1")))
    results = _lines(job, "RESULT")
    for rank in (0, 1):
        assert f"RESULT rank={rank} size=2 attempt=1 sum=[1, 3, 5, 7]" in results
    assert "rank 1 fails on purpose" in job.stderr


def test_accordrun_trains_a_torch_ddp_program_with_torchruns_losses():
    under_accordrun = run_to_end("--nproc-per-node", "2", TORCH_DDP, timeout=90)
    assert under_accordrun.proc.returncode == 0, under_accordrun.stderr
    under_torchrun = _finished(torchrun("--standalone", "--nproc-per-node", "2", TORCH_DDP))
    losses = _lines(under_accordrun, "LOSS")
    assert len(losses) == 10 and losses == _lines(under_torchrun, "LOSS")


def test_accordrun_restarts_a_torch_program():
    """Each attempt's workers get a fresh store: a restarted torch program never reads the
    failed attempt's gloo addresses (under torchrun, whose agent keeps one store for all
    attempts, it often does: 'Connection refused')."""
    job = run_to_end("--nproc-per-node", "2", "--max-restarts", "1", TORCH_ALLREDUCE,
                     env=clean_env(FAIL_RANK="1"), timeout=90)
    assert job.proc.returncode == 0, job.stderr
    assert _lines(job, "TORCH") == [
        "TORCH rank=0 attempt=0 sum=[3.0, 3.0]",
        "TORCH rank=0 attempt=1 sum=[3.0, 3.0]", "TORCH rank=1 attempt=1 sum=[3.0, 3.0]"]
    assert "Restarting every worker (restart 1 of 1)" in job.stderr


# -- two namespaced hosts -------------------------------------------------------------------------
def _two_torchruns(hosts, *extra: str, script: str = TWOHOST, **env: str) -> list[Launched]:
    """torchrun on each host; is_host says which one serves the c10d store (torchrun cannot
    tell from a namespace's addresses) and --local-addr is the host's own address."""
    jobs = []
    for host in hosts:
        jobs.append(torchrun(
            "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{hosts[0].rdzv_addr}:29500", "--local-addr", host.rdzv_addr,
            "--rdzv-conf", f"is_host={str(host is hosts[0]).lower()}", *extra, script,
            prefix=host.prefix, env=clean_env(ACCORD_SOCKET_IFNAME=host.data_if, **env)))
    return jobs


def _two_accordruns(hosts, *extra: str, script: str, **env: str) -> list[Launched]:
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"{hosts[0].rdzv_addr}:29500", "--rdzv-conf", "join_timeout=60",
              *extra, script]
    return [accordrun(*common, prefix=host.prefix,
                      env=clean_env(GLOO_SOCKET_IFNAME=host.data_if, **env))
            for host in hosts]


def _records(jobs: list[Launched], tag: str) -> list[str]:
    try:
        for job in jobs:
            _finished(job, 120)
    finally:
        for job in jobs:
            job.kill()
    return sorted(line for job in jobs for line in _lines(job, tag))


def test_torchrun_runs_an_accord_program_on_two_hosts(two_hosts):
    results = _records(_two_torchruns(two_hosts), "RESULT")
    assert len(results) == 4
    for rank, line in enumerate(results):
        host = two_hosts[rank // 2]
        # as under accordrun (test_multihost): closed-form sums, peers reached over the data net
        assert re.match(rf"RESULT rank={rank} size=4 attempt=0 sum=10 addr={host.data_addr} ",
                        line), results


def test_accordrun_runs_a_torch_program_on_two_hosts(two_hosts):
    results = _records(_two_accordruns(two_hosts, script=TORCH_ALLREDUCE), "TORCH")
    assert results == [f"TORCH rank={r} attempt=0 sum=[10.0, 10.0]" for r in range(4)]


@long_test
def test_torchrun_restarts_an_accord_program_on_two_hosts(two_hosts):
    results = _records(_two_torchruns(two_hosts, "--max-restarts", "1", script=ALLREDUCE,
                                      FAIL_RANK="3"),
                       "RESULT")
    assert [r for r in results if "attempt=1" in r] == \
        [f"RESULT rank={r} size=4 attempt=1 sum=[6, 10, 14, 18]" for r in range(4)]


@long_test
def test_accordrun_restarts_a_torch_program_on_two_hosts(two_hosts):
    results = _records(_two_accordruns(two_hosts, "--max-restarts", "1", script=TORCH_ALLREDUCE,
                                       FAIL_RANK="3"),
                       "TORCH")
    assert [r for r in results if "attempt=1" in r] == \
        [f"TORCH rank={r} attempt=1 sum=[10.0, 10.0]" for r in range(4)]
