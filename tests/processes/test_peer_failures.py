"""A peer that dies, freezes, or leaves in the middle of a collective: the others raise the
right error, naming it, promptly (not when a 30-minute timeout fires), and the group stays
broken afterwards."""

from __future__ import annotations

import signal
import time

import pytest

from .procs import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


@pytest.mark.parametrize("how, count", [("sigkill", 4), ("os_exit", 100_000)])
def test_a_killed_peer_is_named_promptly_and_the_group_stays_broken(start_job, how, count) -> None:
    """3 ranks loop all_reduce (small: recursive doubling; 400 KB: ring); rank 2 dies without
    a goodbye. Group timeout 60 s, so only the dead socket can explain a prompt error."""
    job = start_job("loop_until_failure", 3, port=free_port(), victim=2, count=count, how=how)
    if how == "sigkill":
        job.expect("looping", ranks=[2], timeout=30)
        job.signal(2, signal.SIGKILL)
        killed_at = time.time()
    else:
        killed_at = job.expect("exiting", ranks=[2], timeout=30)[2].info["at"]
        job.expected_dead.add(2)
    failures = job.expect("failure", ranks=[0, 1], timeout=30)
    for rank, report in failures.items():
        assert report.type_name == "PeerError", report
        assert report.is_a("ConnectionError") and report.is_a("RuntimeError"), report
        assert "rank 2" in report.message, report
        assert "all_reduce #" in report.message and f"on rank {rank}" in report.message, report
        assert report.info["at"] - killed_at < 2.0, report
    for key in ("again", "barrier"):  # the group stays broken: later calls raise at once
        for rank, report in job.expect(key, ranks=[0, 1], timeout=10).items():
            assert report.type_name == "PeerError", report
            assert "rank 2" in report.message, report
            assert report.info["elapsed"] < 0.5, report
    assert job.join(timeout=1, ranks=[2])[2] not in (0, None)


def test_a_frozen_peer_times_out_with_the_call_its_number_and_the_rank(start_job) -> None:
    """Rank 1 is SIGSTOPped (its sockets stay open, it just answers nothing): rank 0's
    all_reduce #2 ends after the 2 s timeout, saying what it waited for."""
    job = start_job("frozen_peer", 2, port=free_port())
    job.expect("frozen-ready", ranks=[1], timeout=30)
    job.signal(1, signal.SIGSTOP)
    try:
        job.set("proceed")
        report = job.expect("all_reduce", ranks=[0], timeout=15)[0]
        assert report.type_name == "DistTimeoutError", report
        assert report.is_a("TimeoutError") and report.is_a("RuntimeError"), report
        assert 1.9 <= report.info["elapsed"] < 10, report
        assert report.message.startswith("all_reduce #2 on rank 0"), report
        assert "nothing from rank 1" in report.message, report
        again = job.expect("again", ranks=[0], timeout=10)[0]
        assert again.type_name == "PeerError" and again.info["elapsed"] < 0.5, again
        assert "all_reduce #3" in again.message and "all_reduce #2" in again.message, again
    finally:
        job.signal(1, signal.SIGKILL)
        job.signal(1, signal.SIGCONT)


def test_a_rank_that_raises_and_destroys_releases_its_peers(start_job) -> None:
    """Rank 1's own code raises; its `finally` calls destroy_process_group. Ranks 0 and 2,
    inside an all_reduce with it (timeout 60 s), hear at once that it left."""
    job = start_job("raise_then_destroy", 3, port=free_port(), culprit=1)
    raised_at = job.expect("raised", ranks=[1], timeout=30)[1].info["at"]
    reports = job.expect("all_reduce", ranks=[0, 2], timeout=30)
    for rank, report in reports.items():
        assert report.type_name == "PeerError", report
        assert "rank 1" in report.message and "left" in report.message, report
        assert report.message.startswith(f"all_reduce #2 on rank {rank}"), report
        assert report.info["at"] - raised_at < 2.0, report
        assert report.info["elapsed"] < 5.0, report
    for report in job.expect("again", ranks=[0, 2], timeout=10).values():
        assert report.type_name == "PeerError" and report.info["elapsed"] < 0.5, report
    assert job.join(timeout=10, ranks=[1]) == {1: 0}  # it left cleanly
