"""shrink_group across hosts: four ranks on two namespaced hosts (0, 1 on a — rank 0 hosts the
store — and 2, 3 on b) all_reduce in a loop; a rank dies, or host b's link is pulled; the
survivors shrink by the ranks they saw go and all_reduce on the shrunk world (which still spans
both hosts when only a rank died: 2 + 1 ranks, so flat algorithms over TCP and shared memory;
the host's ranks alone when host b is lost)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from .test_host_loss import Ranks, _pull_link

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


@pytest.fixture
def ranks_of(two_hosts):
    started: list[Ranks] = []

    def run(**env: str) -> Ranks:
        started.append(Ranks(two_hosts, SHRINK="1", **env))
        return started[-1]

    yield run
    b = two_hosts[1]
    for ranks in started:
        ranks.kill()
    subprocess.run(["ip", "-n", b.netns, "link", "set", b.data_if, "up"], capture_output=True, timeout=20)


def test_survivors_on_two_hosts_shrink_when_a_rank_dies(ranks_of) -> None:
    ranks = ranks_of()
    pids = ranks.pids()
    os.kill(pids[3], signal.SIGKILL)
    found = ranks.results([0, 1, 2], timeout=30)
    for rank, got in found.items():
        assert got["error"] == "PeerError" and got["lost"] == [3], got
        assert (got["new_rank"], got["size"]) == (rank, 3) and got["correct"], got
        assert got["shrink_s"] < 1.0, got


def test_survivors_shrink_when_a_host_is_lost(two_hosts, ranks_of) -> None:
    """With the shortest ACCORD_PEER_LOST_TIMEOUT (2 s): how soon the default one names a
    lost host is test_host_loss's business (link_pulled); this test is about the shrink."""
    ranks = ranks_of(ACCORD_PEER_LOST_TIMEOUT="2")
    ranks.pids()
    lost_at = time.time()
    _pull_link(two_hosts[1])
    found = ranks.results([0, 1], timeout=30)
    for rank, got in found.items():
        assert got["error"] == "PeerError" and got["lost"] == [2, 3], got
        assert (got["new_rank"], got["size"]) == (rank, 2) and got["correct"], got
        assert got["at"] - lost_at < 7.0, got  # named within ~2.5 s, then shrunk
