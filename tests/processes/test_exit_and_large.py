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


def test_64_mib_both_ways_at_once_and_all_reduce(start_job) -> None:
    job = start_job("large_messages", 2, port=free_port(), mib=64)
    for key in ("isend_recv", "send_recv", "all_reduce"):
        for report in job.expect(key, timeout=45).values():
            assert report.ok, report
        for report in job.expect(f"{key}_values", timeout=5).values():
            assert report.info["correct"], (key, report)
    assert job.join(timeout=20) == {0: 0, 1: 0}
