"""shrink_group: a job that lost a rank goes on in place. The survivors of a SIGKILLed rank
call ``shrink_group([dead])`` and get a working group — the default group (a new world,
renumbered, other groups destroyed) or a subgroup (global ranks kept) — on shared memory and
on TCP, well within a second of the error (the issue's target); survivors that disagree on
whom to exclude get a timeout that says who kept whom."""

from __future__ import annotations

import signal

import pytest

from .procs import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_survivors_shrink_the_default_group_and_go_on(start_job, transport: str) -> None:
    job = start_job("membership", 4, name="shrink_world", port=free_port(), victim=2, transport=transport)
    job.expect("looping", ranks=[2], timeout=30)
    job.signal(2, signal.SIGKILL)
    for rank, report in job.expect("failure", ranks=[0, 1, 3], timeout=30).items():
        assert report.type_name == "PeerError" and "rank 2" in report.message, report
        assert report.info["peer"] == 2, report  # (what the README's loop passes to shrink_group)
    shrunk = job.expect("shrunk", ranks=[0, 1, 3], timeout=30)
    for old_rank, report in shrunk.items():
        info = report.info
        assert (info["rank"], info["size"]) == ({0: 0, 1: 1, 3: 2}[old_rank], 3), info
        assert info["first"] == 3.0 and info["checked"] == {"rank": info["rank"], "size": 3}, info
        assert info["first_after_error_s"] < 1.0, info  # the target
        assert info["old_group"] == "DestroyedGroupError", info  # other groups go, as torch's
        assert any("destroy 1 other process groups" in w for w in info["warned"]), info
        assert info["desc"] == "default:shrunken", info


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_survivors_shrink_a_subgroup_and_keep_their_global_ranks(start_job, transport: str) -> None:
    job = start_job("membership", 4, name="shrink_subgroup", port=free_port(), victim=1, transport=transport)
    job.expect("looping", ranks=[1], timeout=30)
    job.signal(1, signal.SIGKILL)
    job.expect("failure", ranks=[0, 2], timeout=30)
    shrunk = job.expect("shrunk", ranks=[0, 2], timeout=30)
    for rank, report in shrunk.items():
        info = report.info
        assert info["rank"] == rank and info["ranks"] == [0, 2], info
        assert info["group_rank"] == [0, 2].index(rank), info
        assert info["checked"]["size"] == 2 and info["old_destroyed"], info
        assert info["shrink_s"] < 1.0 and info["desc"].endswith(":shrunk"), info


def test_survivors_that_disagree_are_told_who_kept_whom(start_job) -> None:
    job = start_job("membership", 3, name="disagree", port=free_port())
    shrink = job.expect("shrink", timeout=30)
    assert shrink[0].ok and shrink[1].ok, shrink  # ranks 0 and 1 agree: a world of two
    assert job.expect("after", ranks=[0, 1], timeout=10)[0].info["size"] == 2
    lone = shrink[2]
    assert lone.type_name == "DistTimeoutError", lone
    assert "rank 0 kept ranks [0, 1]" in lone.message and "this rank kept ranks [0, 2]" in lone.message, lone
