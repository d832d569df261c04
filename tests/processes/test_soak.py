"""Nothing leaks (issue 13 item 4): a 2-rank job churns groups (create, all_reduce, a
mismatch or an abort now and then, destroy), runs many small collectives and restarts its world, and its
descriptors, threads, shared-memory segments and RSS stay where they were after the warm-up.

Default run: 300 groups and 100,000 collectives over shared memory, 100 groups and 20,000
collectives over TCP; ``pytest --long``: ten times the collectives."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess
JOB = Path(__file__).with_name("soak_job.py")
LONG = os.environ.get("ACCORD_LONG_TESTS") == "1"
RSS_SLACK = 4 << 20  # the bound: RSS + < 4 MiB


def _free_ports(n: int) -> str:
    probes = [socket.socket() for _ in range(n)]
    for probe in probes:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in probes]
    for probe in probes:
        probe.close()
    return ",".join(map(str, ports))


@pytest.mark.parametrize("transport,cycles,calls", [("auto", 300, 100_000), ("tcp", 100, 20_000)])
def test_groups_collectives_and_restarts_leave_nothing_behind(transport, cycles, calls):
    calls *= 10 if LONG else 1
    env = dict(os.environ, ACCORD_TRANSPORT=transport)
    ports = _free_ports(5)  # a world of its own for the first and each of 4 restarts
    procs = [subprocess.Popen([sys.executable, str(JOB), str(rank), "2", ports, str(cycles),
                               str(calls), "3"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [proc.communicate(timeout=600 if LONG else 120) for proc in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
        line = next(line for line in out.splitlines() if line.startswith("SOAK "))
        soak = json.loads(line[5:])
        before, after = soak["before"], soak["after"]
        print(f"soak {transport} rank {soak['rank']}: {cycles} groups, {calls} collectives, "
              f"3 restarts: fds {before['fds']} -> {after['fds']}, threads {before['threads']} "
              f"-> {after['threads']}, mapped segments {before['mapped_segments']} -> "
              f"{after['mapped_segments']}, rss {before['rss'] >> 10} -> {after['rss'] >> 10} KiB, "
              f"shm {before['shm']} -> {after['shm']}")
        assert after["fds"] <= before["fds"], soak
        assert after["threads"] <= before["threads"] and after["tasks"] <= before["tasks"], soak
        assert after["shm"] <= before["shm"], soak
        assert after["mapped_segments"] <= before["mapped_segments"], soak  # destroyed groups unmapped
        assert after["rss"] - before["rss"] < RSS_SLACK, soak
