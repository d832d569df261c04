"""accordrun on one node: the environment contract, script arguments, -m, --no-python, output
prefixing, log files, a real all_reduce job, the legacy launcher and the console script."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from .running import SCRIPTS, Launched, clean_env, run_to_end

pytestmark = pytest.mark.multiprocess
ROOT = Path(__file__).resolve().parents[2]


def _records(text: str, tag: str) -> dict[int, dict]:
    found = {}
    for line in text.splitlines():
        head, _, body = line.partition(f"{tag} ")
        if body:
            record = json.loads(body)
            found[int(record.get("RANK", record.get("rank")))] = {"prefix": head, **record}
    return found


def test_env_contract_args_and_prefixes():
    script = str(SCRIPTS / "env_dump.py")
    job = run_to_end("--nproc_per_node=2", "--rdzv-id", "job7", "--max-restarts", "2",
                     "--role", "trainer", "--standalone", script, "--flag", "value", "-x")
    assert job.proc.returncode == 0, job.stderr
    records = _records(job.stdout, "ENV")
    assert sorted(records) == [0, 1]
    ports = {r["MASTER_PORT"] for r in records.values()}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for rank, env in records.items():
        assert env["prefix"] == f"[rank{rank}]: "
        assert env["LOCAL_RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["LOCAL_WORLD_SIZE"] == "2" and env["GROUP_RANK"] == "0"
        assert env["GROUP_WORLD_SIZE"] == "1" and env["ROLE_NAME"] == "trainer"
        assert env["ROLE_RANK"] == str(rank) and env["ROLE_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0" and env["TORCHELASTIC_MAX_RESTARTS"] == "2"
        assert env["TORCHELASTIC_RUN_ID"] != "job7"  # --standalone picks a fresh id, as torchrun
        assert env["TORCHELASTIC_ERROR_FILE"].endswith(f"attempt_0/{rank}/error.json")
        assert env["OMP_NUM_THREADS"] == "1"
        # sys.argv and __main__ exactly as `python env_dump.py --flag value -x` gives them
        assert env["argv"] == [script, "--flag", "value", "-x"]
        assert env["name"] == "__main__" and env["main_is_me"]
        assert env["file"] == script and env["path0"] == str(SCRIPTS)
    assert {line for line in job.err if "stderr line" in line} == {
        "[rank0]: stderr line of rank 0", "[rank1]: stderr line of rank 1"}
    assert "stderr line" not in job.stdout


def test_nproc_auto_is_the_cpus_this_process_may_use():
    job = run_to_end("--nproc-per-node", "auto", str(SCRIPTS / "env_dump.py"),
                     env=clean_env(OMP_NUM_THREADS="3"))
    records = _records(job.stdout, "ENV")
    cpus = len(os.sched_getaffinity(0))
    assert sorted(records) == list(range(cpus)), job.stderr
    assert {r["LOCAL_WORLD_SIZE"] for r in records.values()} == {str(cpus)}
    assert {r["OMP_NUM_THREADS"] for r in records.values()} == {"3"}  # set: left alone


def test_module_mode_runs_like_python_dash_m():
    job = run_to_end("--nproc-per-node", "2", "-m", "pkgmod.main", "a", "--b", cwd=SCRIPTS)
    records = _records(job.stdout, "MOD")
    assert sorted(records) == [0, 1], job.stderr
    for record in records.values():
        assert record["argv"] == [str(SCRIPTS / "pkgmod" / "main.py"), "a", "--b"]
        assert record["name"] == "__main__" and record["package"] == "pkgmod"
        assert record["path0"] == str(SCRIPTS)


def test_no_python_executes_the_command():
    job = run_to_end("--nproc-per-node", "2", "--no-python", "sh", "-c",
                     'echo "rank $RANK of $WORLD_SIZE"')
    assert job.proc.returncode == 0, job.stderr
    assert sorted(job.out) == ["[rank0]: rank 0 of 2", "[rank1]: rank 1 of 2"]


def test_allreduce_job_with_tee_log_dir_and_rank_filter(tmp_path):
    job = run_to_end("--nproc-per-node", "3", "--log-dir", str(tmp_path), "--tee", "1",
                     "--local-ranks-filter", "0,2", str(SCRIPTS / "allreduce.py"))
    assert job.proc.returncode == 0, job.stderr
    shown = sorted(line for line in job.out if "RESULT" in line)
    assert shown == [f"[rank{r}]: RESULT rank={r} size=3 attempt=0 sum=[3, 6, 9, 12]"
                     for r in (0, 2)]
    logs = sorted(tmp_path.glob("*/attempt_0/*/stdout.log"))
    assert [p.parent.name for p in logs] == ["0", "1", "2"]
    assert "RESULT rank=1 size=3" in logs[1].read_text()  # filtered from the console, not the log
    assert not list(tmp_path.glob("*/attempt_0/*/stderr.log"))  # --tee 1: stdout only


def test_redirect_sends_output_to_files_only(tmp_path):
    job = run_to_end("--nproc-per-node", "2", "--log-dir", str(tmp_path), "-r", "0:3,1:0",
                     str(SCRIPTS / "env_dump.py"))
    assert job.proc.returncode == 0, job.stderr
    assert [line[:8] for line in job.out] == ["[rank1]:"]
    assert [line[:8] for line in job.err] == ["[rank1]:"]
    (rank0,) = tmp_path.glob("*/attempt_0/0")
    assert (rank0 / "stdout.log").read_text().startswith("ENV ")
    assert (rank0 / "stderr.log").read_text() == "stderr line of rank 0\n"


@pytest.mark.parametrize("use_env", [False, True])
def test_legacy_launcher(use_env):
    args = ["--nproc_per_node=2", *(["--use_env"] if use_env else []),
            str(SCRIPTS / "legacy.py"), "x"]
    job = run_to_end(*args, module="accord.launch")
    assert job.proc.returncode == 0, job.stderr
    assert "FutureWarning" in job.stderr and "deprecated" in job.stderr
    for rank in (0, 1):
        arg = "None" if use_env else str(rank)
        assert f"[rank{rank}]: LEGACY local_rank_arg={arg} env={rank} rest=['x']" in job.out


def test_usage_errors_exit_2_and_name_the_option():
    job = run_to_end("--nnodes", "3:2", str(SCRIPTS / "env_dump.py"))
    assert job.proc.returncode == 2 and "--nnodes" in job.stderr
    job = run_to_end("--no-python", "-m", "x")
    assert job.proc.returncode == 2 and "--no-python" in job.stderr


def test_console_script_is_declared():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^accordrun = "accord\.launcher\.cli:main"$', pyproject, re.M)
    installed = Path(sys.executable).parent / "accordrun"
    if not installed.exists():
        pytest.skip("accordrun is not installed in this environment (pip install -e . makes it)")
    job = Launched([str(installed), "--help"])
    assert job.finish(30) == 0 and "--nproc-per-node" in job.stdout
