"""Orderly departures (the last message still arrives; then "left", not "died") and large
messages in both directions at once (no deadlock, exact results)."""

from __future__ import annotations

import pytest

from .procs import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


@pytest.mark.parametrize("how, receiver_first", [
    ("destroy", False), ("destroy", True), ("exit", False), ("exit", True)])
def test_the_last_message_arrives_then_the_peer_has_left(start_job, how, receiver_first) -> None:
    """Rank 1 sends, then leaves at once: destroy_process_group, or a plain interpreter exit
    (the atexit hook says goodbye). Rank 0 receives the message whether it was already
    waiting or asks afterwards; a further recv says rank 1 left, and says so at once."""
    job = start_job("orderly_exit", 2, port=free_port(), how=how, receiver_first=receiver_first)
    job.expect("left", ranks=[1], timeout=20)
    first = job.expect("recv", ranks=[0], timeout=20)[0]
    assert first.ok, first
    assert job.expect("values", ranks=[0], timeout=5)[0].info["correct"]
    again = job.expect("recv_again", ranks=[0], timeout=20)[0]
    assert again.type_name == "PeerError", again
    assert again.is_a("ConnectionError"), again
    assert "rank 1 has left" in again.message, again
    assert "died" not in again.message and "gone" not in again.message, again
    assert again.info["elapsed"] < 2, again
    assert job.join(timeout=20, ranks=[1]) == {1: 0}


@pytest.mark.parametrize("transport, delay", [("auto", 0.0), ("tcp", 1.0)])
def test_monitored_barrier_names_every_rank_that_exited(start_job, transport, delay) -> None:
    """Ranks 1-3 exit right after init; rank 0's monitored_barrier(wait_all_ranks=True) names
    them all in one message (torch: "Ranks 1, 2, 3 failed to pass monitoredBarrier"), at
    once rather than after its 10 s timeout, whether they left before it started or while it
    waited."""
    job = start_job("monitored_barrier_after_exit", 4, port=free_port(), transport=transport,
                    delay=delay)
    report = job.expect("monitored_barrier", ranks=[0], timeout=30)[0]
    assert report.type_name == "PeerError" and report.is_a("RuntimeError"), report
    assert "ranks 1, 2, 3 failed to pass monitored_barrier" in report.message, report
    assert "have left the group" in report.message, report
    assert report.info["elapsed"] < 5, report
    job.set("release")
    assert job.join(timeout=20) == {0: 0, 1: 0, 2: 0, 3: 0}


def test_64_mib_both_ways_at_once_and_all_reduce(start_job) -> None:
    job = start_job("large_messages", 2, port=free_port(), mib=64)
    for key in ("isend_recv", "send_recv", "all_reduce"):
        for report in job.expect(key, timeout=45).values():
            assert report.ok, report
        for report in job.expect(f"{key}_values", timeout=5).values():
            assert report.info["correct"], (key, report)
    assert job.join(timeout=20) == {0: 0, 1: 0}
