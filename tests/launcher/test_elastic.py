"""Elastic jobs (--nnodes MIN:MAX, c10d): a node lost mid-job, a node that arrives mid-job, a
spare, MIN and --max-restarts. Launchers on this host, each a real process; "killing a node"
SIGKILLs its launcher and its workers together.

Node loss is timed with the default heartbeat timeout (the target: the job goes on within
10 s); the other tests shorten it to keep the suite quick.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time

import pytest

from .running import SCRIPTS, clean_env, free_port, kill_all, wait_gone

pytestmark = pytest.mark.multiprocess
ELASTIC = str(SCRIPTS / "elastic.py")
RESULT = re.compile(r"RESULT rank=(\d+) size=(\d+) attempt=(\d+) sum=(\d+) node=(\d+)/(\d+) pid=(\d+)")
QUICK = {"ACCORD_LAUNCHER_HEARTBEAT_TIMEOUT": "2"}


def _results(job) -> list[dict[str, int]]:
    keys = ("rank", "size", "attempt", "sum", "node", "nodes", "pid")
    return [dict(zip(keys, map(int, m.groups()))) for line in list(job.out)
            if (m := RESULT.search(line))]


def _seen(job, attempt: int, size: int, count: int = 1):
    return lambda: sum(r["attempt"] == attempt and r["size"] == size for r in _results(job)) >= count


def _serving(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Nodes:
    """Launchers of one elastic job on this host; the first one started hosts the store."""

    def __init__(self, launch, nnodes: str, *extra: str, nproc: int = 1, **env: str) -> None:
        self.launch, self.port = launch, free_port()
        self.args = ["--nnodes", nnodes, "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", f"127.0.0.1:{self.port}", *extra, ELASTIC]
        self.env = env

    def start(self):
        job = self.launch(*self.args, env=clean_env(**self.env))
        if not _serving(self.port):  # the first launcher: let it bind the endpoint first
            deadline = time.monotonic() + 30
            while not _serving(self.port) and time.monotonic() < deadline:
                time.sleep(0.05)
        return job


def _kill_node(job) -> list[int]:
    """SIGKILL a launcher and its workers at once: the node is gone."""
    pids = [job.proc.pid, *(r["pid"] for r in _results(job))]
    kill_all(pids)
    return pids


def test_a_lost_node_leaves_and_the_job_goes_on_with_the_rest(launch):
    nodes = Nodes(launch, "1:2", "--max-restarts", "3")
    a = nodes.start()
    b = nodes.start()
    for job in (a, b):
        job.wait_for(_seen(job, 0, 2), 30, "attempt 0 on 2 nodes")
    killed = _kill_node(b)
    start = time.monotonic()
    a.wait_for(_seen(a, 1, 1), 30, "attempt 1 on the node left")
    elapsed = time.monotonic() - start
    assert a.finish(30) == 0, a.stderr
    assert wait_gone(killed, 5) == []
    (after,) = [r for r in _results(a) if r["attempt"] == 1]
    assert (after["rank"], after["size"], after["sum"], after["nodes"]) == (0, 1, 1, 1)
    assert "stopped answering for 5 s" in a.stderr
    assert "Restarting every worker (restart 1 of 3), on 1 node instead of 2." in a.stderr
    assert elapsed <= 10, f"the job went on {elapsed:.1f} s after the node was lost\n{a.stderr}"


def test_a_node_that_arrives_is_taken_in_with_new_ranks(launch):
    nodes = Nodes(launch, "1:2", "--max-restarts", "2", "--rdzv-conf", "last_call_timeout=1",
                  nproc=2, **QUICK)
    a = nodes.start()
    a.wait_for(_seen(a, 0, 2, count=2), 30, "attempt 0 on 1 node")
    start = time.monotonic()
    b = nodes.start()
    for job in (a, b):
        job.wait_for(_seen(job, 1, 4, count=2), 30, "attempt 1 on 2 nodes")
    elapsed = time.monotonic() - start
    assert a.finish(30) == 0 and b.finish(30) == 0, a.stderr + b.stderr
    after = [r for job in (a, b) for r in _results(job) if r["attempt"] == 1]
    assert sorted(r["rank"] for r in after) == [0, 1, 2, 3]
    assert {(r["size"], r["sum"], r["nodes"]) for r in after} == {(4, 10, 2)}
    assert sorted({r["node"] for r in _results(b)}) == [1]  # the newcomer came last
    assert "this node waits for it to restart and take it in" in b.stderr
    assert "attempt 0 stopped: 1 node waiting to join. Restarting every worker (restart 1 of 2), " \
        "on 2 nodes instead of 1." in a.stderr
    assert elapsed <= 10, f"the job took the node in after {elapsed:.1f} s\n{a.stderr}\n{b.stderr}"


def test_a_spare_waits_and_replaces_a_lost_node(launch):
    nodes = Nodes(launch, "1:2", "--max-restarts", "2", **QUICK)
    a, b = nodes.start(), nodes.start()
    for job in (a, b):
        job.wait_for(_seen(job, 0, 2), 30, "attempt 0 on 2 nodes")
    c = nodes.start()
    c.wait_for(lambda: "waits as a spare" in c.stderr, 30, "the spare's notice")
    time.sleep(1)  # the job has room for no one: nothing restarts
    assert not any(r["attempt"] > 0 for r in _results(a)), a.stderr
    _kill_node(b)
    for job in (a, c):
        job.wait_for(_seen(job, 1, 2), 30, "attempt 1 with the spare")
    assert a.finish(30) == 0 and c.finish(30) == 0, a.stderr + c.stderr
    assert "on 2 nodes instead" not in a.stderr  # as many nodes as before


def test_below_min_nodes_the_job_fails_and_says_why(launch):
    """The workers never notice the lost node (QUIET: no collective while they hold): the
    launcher does, and stops them."""
    nodes = Nodes(launch, "2:3", "--max-restarts", "3", "--rdzv-conf", "last_call_timeout=1",
                  QUIET="1", **QUICK)
    a, b = nodes.start(), nodes.start()
    for job in (a, b):
        job.wait_for(_seen(job, 0, 2), 30, "attempt 0 on 2 nodes")
    _kill_node(b)
    assert a.finish(30) == 1
    assert re.search(r"the job cannot go on: lost node \d \(.+\): 1 node left, fewer than the 2 "
                     r"that --nnodes 2:3 needs\.", a.stderr), a.stderr
    assert "Root Cause (first observed failure):" in a.stderr
    assert "rank      : <none: the launcher itself>" in a.stderr
    assert "PeerError" not in a.stderr and "exitcode  : -15" not in a.stderr  # stopped: no failure


def test_max_restarts_bounds_a_lost_node(launch):
    nodes = Nodes(launch, "1:2", **QUICK)  # --max-restarts 0
    a, b = nodes.start(), nodes.start()
    for job in (a, b):
        job.wait_for(_seen(job, 0, 2), 30, "attempt 0 on 2 nodes")
    _kill_node(b)
    assert a.finish(30) == 1
    assert "failed after 0 restart(s) (--max-restarts 0); first failure: the launcher of node" \
        in a.stderr


def test_max_restarts_bounds_a_node_that_arrives(launch, tmp_path):
    release = tmp_path / "release"
    nodes = Nodes(launch, "1:2", "--rdzv-conf", "last_call_timeout=1", **QUICK,
                  RELEASE_FILE=str(release))
    a = nodes.start()
    a.wait_for(_seen(a, 0, 1), 30, "attempt 0 on 1 node")
    b = nodes.start()
    assert b.finish(30) == 1
    assert "no restart left to take it in (--max-restarts 0)" in b.stderr
    release.touch()
    assert a.finish(30) == 0, a.stderr
    assert [r["attempt"] for r in _results(a)] == [0]


def test_a_host_cut_off_the_network_is_lost_and_the_job_goes_on(launch, two_hosts):
    """No connection is reset when a host drops off the network: the workers of the other host
    hang in their all_reduce, and only the heartbeat tells. Host a serves the store, with
    ACCORD_STORE_EXIT_GRACE=0: at the end it would otherwise serve on for the default 5 s,
    waiting for host b's launcher to disconnect, which it cannot (tests/store/test_exit_grace.py
    tests the grace)."""
    a, b = two_hosts
    args = ["--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{a.rdzv_addr}:29500", "--max-restarts", "1", ELASTIC]
    job_a = launch(*args, prefix=a.prefix, env=clean_env(ACCORD_SOCKET_IFNAME=a.data_if,
                                                         ACCORD_STORE_EXIT_GRACE="0", **QUICK))
    job_b = launch(*args, prefix=b.prefix, env=clean_env(ACCORD_SOCKET_IFNAME=b.data_if, **QUICK))
    for job in (job_a, job_b):
        job.wait_for(_seen(job, 0, 2), 30, "attempt 0 on 2 hosts")
    for ifname in (b.rdzv_if, b.data_if):
        subprocess.run(["ip", "-n", b.netns, "link", "set", ifname, "down"], check=True, timeout=20)
    try:
        job_a.wait_for(_seen(job_a, 1, 1), 30, "attempt 1 on host a alone")
        assert job_a.finish(30) == 0, job_a.stderr
    finally:
        for ifname in (b.rdzv_if, b.data_if):
            subprocess.run(["ip", "-n", b.netns, "link", "set", ifname, "up"], timeout=20)
    assert "stopped answering for 2 s" in job_a.stderr
