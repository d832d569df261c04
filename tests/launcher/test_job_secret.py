"""accordrun gives a one-node job a fresh secret: its workers prove it (accord) or are admitted
as the launcher's own processes (torch's client), while any other process is refused."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

import accord
from accord.store.tcp_store import TCPStore

from .running import SCRIPTS, accordrun, clean_env

pytestmark = pytest.mark.multiprocess


def _probe(job, flag):
    job.wait_for(lambda: "PROBE" in job.stdout, 60, "the worker's PROBE line")
    line = next(line for line in job.out if "PROBE" in line)
    port, digest = line.split("PROBE ")[1].split()
    return int(port), digest


def test_a_one_node_job_gets_a_secret_and_strangers_are_refused(tmp_path, monkeypatch):
    flag = tmp_path / "go"
    job = accordrun("--nproc-per-node", "1", str(SCRIPTS / "secret_probe.py"), str(flag),
                    env=clean_env())
    try:
        port, digest = _probe(job, flag)
        assert digest != "none"  # the worker has a secret; its value is never printed
        monkeypatch.delenv("ACCORD_SECRET", raising=False)
        with pytest.raises(accord.DistStoreError, match="requires the job's secret"):
            TCPStore("127.0.0.1", port, timeout=timedelta(seconds=5))
        monkeypatch.setenv("ACCORD_SECRET", "a guess")
        with pytest.raises(accord.AuthenticationError, match="its secret differs"):
            TCPStore("127.0.0.1", port, timeout=timedelta(seconds=5))
        torch = pytest.importorskip("torch.distributed")
        with pytest.raises(Exception):  # torch's client, from a process that is no worker
            torch.TCPStore("127.0.0.1", port, timeout=timedelta(seconds=1))
    finally:
        flag.touch()
    assert job.finish(60) == 0, job.stderr
    assert "STILL SERVING" in job.stdout
    assert "refused" in job.stderr  # the launcher logged each refusal


def test_the_users_secret_is_kept(tmp_path):
    flag = tmp_path / "go"
    flag.touch()
    job = accordrun("--nproc-per-node", "1", str(SCRIPTS / "secret_probe.py"), str(flag),
                    env=clean_env(ACCORD_SECRET="mine"))
    _, digest = _probe(job, flag)
    assert job.finish(60) == 0, job.stderr
    assert digest == hashlib.sha256(b"mine").hexdigest()[:16]
