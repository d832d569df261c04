"""Hierarchical collectives on two "hosts" (network namespaces) × two ranks: the results, the
bytes that cross between the hosts against the flat ring's, and a rank that dies in the middle
of a hierarchical all_reduce, named by the others within seconds."""

from __future__ import annotations

import json

import pytest

from .running import SCRIPTS, clean_env

pytestmark = pytest.mark.multiprocess
SCRIPT = str(SCRIPTS / "hierarchy.py")


def _run(launch, hosts, **env: str) -> tuple[dict[int, dict], list]:
    a, b = hosts
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"{a.rdzv_addr}:29500", "--rdzv-conf", "join_timeout=60", SCRIPT]
    jobs = [launch(*common, prefix=h.prefix, env=clean_env(ACCORD_SOCKET_IFNAME=h.data_if, **env))
            for h in hosts]
    codes = [job.finish(120) for job in jobs]
    found = {}
    for host, job in zip("ab", jobs):
        for line in job.out:
            if "RESULT " in line:
                result = json.loads(line.split("RESULT ", 1)[1])
                found[result["rank"]] = {**result, "host": host}
    return found, [(code, job.stderr[-2000:]) for code, job in zip(codes, jobs)]


def test_results_and_bytes_between_hosts(launch, two_hosts):
    found, codes = _run(launch, two_hosts)
    assert sorted(found) == [0, 1, 2, 3], codes
    n = 4
    for rank, got in found.items():
        assert got["hierarchical"].startswith("<Hierarchy 2 hosts × 2"), got
        res = got["results"]
        assert res["all_reduce"] == [sum(r + i for r in range(n)) for i in range(5)]
        assert res["broadcast"] == [n - 1.0] * 3
        assert res["all_gather"] == [[r] * (r + 1) for r in range(n)]
        assert res["reduce_scatter"] == [sum(10 * r + rank for r in range(n))] * 2
    for host in "ab":
        ranks = [r for r in found.values() if r["host"] == host]
        # the counter is the host's: every rank of it reads the same totals
        flat_bytes, hier_bytes = ranks[0]["flat"][0], ranks[0]["hier"][0]
        moved = ranks[0]["bytes"]
        # flat ring in rank order: 2(n-1)/n of the data over the one edge leaving this host;
        # hierarchical: each of the 2 local ranks sends its half once, 2(H-1)/H·S/2 twice
        assert flat_bytes >= 1.4 * moved, (host, flat_bytes, moved)
        assert hier_bytes <= 1.1 * moved and hier_bytes <= 0.75 * flat_bytes, (host, hier_bytes, flat_bytes)


def test_a_rank_dying_in_a_hierarchical_all_reduce_is_named(launch, two_hosts):
    found, _ = _run(launch, two_hosts, VICTIM="3")
    survivors = {r: got for r, got in found.items() if r != 3}
    assert sorted(survivors) == [0, 1, 2], found
    for got in survivors.values():
        assert got["error"] in ("PeerError", "DistBackendError"), got
        assert "rank 3" in got["message"], got
        assert got["after"] < 2.0, got
