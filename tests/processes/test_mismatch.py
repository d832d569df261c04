"""Ranks that disagree: different sizes, different collectives, a p2p size mismatch. The
ranks raise CollectiveMismatchError within seconds (the group timeout is 60 s) and nothing
hangs."""

from __future__ import annotations

import pytest

from .procs import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def test_different_counts_raise_a_mismatch_on_both_ranks(start_job) -> None:
    job = start_job("mismatch", 2, port=free_port(), case="count")
    calls = job.expect("call", timeout=20)
    for rank, report in calls.items():
        assert report.type_name == "CollectiveMismatchError", report
        assert report.is_a("RuntimeError"), report
        assert report.message.startswith(f"all_reduce #1 on rank {rank}"), report
        assert "4 elements" in report.message and "8 elements" in report.message, report
        assert report.info["elapsed"] < 5, report
    for report in job.expect("next", timeout=10).values():  # the group is broken now
        assert report.type_name == "PeerError" and report.info["elapsed"] < 0.5, report
        assert "barrier #2" in report.message and "all_reduce #1" in report.message, report


def test_broadcast_against_all_reduce_names_both_operations(start_job) -> None:
    """Rank 0 broadcasts (as the root it only sends, so its call may succeed); rank 1
    all_reduces and sees rank 0's broadcast message: a mismatch naming both calls. Rank 0
    learns it at its next call (rank 1 told it)."""
    job = start_job("mismatch", 2, port=free_port(), case="op")
    calls = job.expect("call", timeout=20)
    mismatch = calls[1]
    assert mismatch.type_name == "CollectiveMismatchError", mismatch
    assert "broadcast #1" in mismatch.message and "all_reduce #1" in mismatch.message, mismatch
    assert "rank 0 called broadcast #1" in mismatch.message, mismatch
    assert mismatch.info["elapsed"] < 5, mismatch
    if not calls[0].ok:
        assert calls[0].type_name in ("CollectiveMismatchError", "PeerError"), calls[0]
    following = job.expect("next", ranks=[0], timeout=10)[0]
    assert following.type_name in ("CollectiveMismatchError", "PeerError"), following
    assert "rank 1" in following.message, following
    assert "broadcast #1" in following.message and "all_reduce #1" in following.message, following
    assert following.info["elapsed"] < 5, following


def test_p2p_size_mismatch_raises_on_the_receiver_only(start_job) -> None:
    job = start_job("mismatch", 2, port=free_port(), case="p2p")
    calls = job.expect("call", timeout=20)
    assert calls[0].ok, calls[0]  # the sender handed 5 elements to the transport
    receiver = calls[1]
    assert receiver.type_name == "CollectiveMismatchError", receiver
    assert "20-byte" in receiver.message and "16 bytes" in receiver.message, receiver
    assert receiver.message.startswith("recv from rank 0 (tag 0) on rank 1"), receiver
    assert receiver.info["elapsed"] < 5, receiver
    # a p2p mismatch does not break the group: the next message arrives intact
    assert job.expect("next", ranks=[1], timeout=10)[1].info["values"] == [100, 101, 102, 103]
