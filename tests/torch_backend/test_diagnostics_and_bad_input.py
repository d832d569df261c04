"""accord's diagnostics survive torch's wrapping, and bad input is refused on the calling rank.

Through torch.distributed's API on backend "accord": a mismatch, a dead peer and a frozen peer
raise accord's errors (the rank, the operation and its call number; the stuck report on a
timeout) within seconds; TORCH_DISTRIBUTED_DEBUG=DETAIL checks arguments across ranks before
any byte moves; a meta-device tensor, a CSR layout, an 8-bit float, a sparse MAX or a bitwise
op on floats raise at once on the rank that made the call, caught by ``except RuntimeError``,
and the group still works.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from . import harness  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(300)]


def test_mismatched_collectives_name_both_calls() -> None:
    got = harness.run("mismatched_ops", "accord", 2)
    for rank, report in enumerate(got):
        assert "RuntimeError" in report["mro"], report
        assert report["type"] in ("CollectiveMismatchError", "PeerError"), report
        assert "#2" in report["message"], report
    assert any(r["type"] == "CollectiveMismatchError" and "broadcast" in r["message"]
               and "all_reduce" in r["message"] for r in got), got


def test_a_dead_peer_is_named_within_seconds() -> None:
    got = harness.run("dead_peer", "accord", 3, dies=(2,))
    for report in got[:2]:
        assert report["type"] == "PeerError", report
        assert "rank 2" in report["message"] and "all_reduce #2" in report["message"], report
        assert report["elapsed"] < 10, report


def test_a_frozen_peer_times_out_with_the_stuck_report() -> None:
    got = harness.run("frozen_peer", "accord", 2, pg_timeout=2)
    report = got[0]
    assert report["type"] == "DistTimeoutError", report
    assert "TimeoutError" in report["mro"] and "RuntimeError" in report["mro"], report
    assert "all_reduce #2" in report["message"] and "rank 1" in report["message"], report
    assert "Stuck report" in report["message"] or "stuck" in report["message"].lower(), report


def test_torch_distributed_debug_detail_checks_before_sending() -> None:
    got = harness.run("detail_size_mismatch", "accord", 2,
                      env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    for report in got:
        assert report["bad"]["type"] == "CollectiveMismatchError", report
        assert report["after"] == [2.0, 2.0], report


def test_bad_input_is_refused_on_the_calling_rank(accord_programs) -> None:
    """(In accord's world-2 job of shared_jobs.py, after the other programs of ACCORD_PLAN.)"""
    got = accord_programs("bad_inputs")
    mine = got[0]
    for case in ("meta_device", "sparse_csr", "float8", "sparse_max", "band_float"):
        report = mine[case]
        assert report["type"] is not None, (case, report)
        assert "RuntimeError" in report["mro"], (case, report)
        assert report["elapsed"] < 1, (case, report)
    assert "CPU" in mine["meta_device"]["message"]
    assert "sparse COO" in mine["sparse_csr"]["message"]
    assert "float8" in mine["float8"]["message"] and "bfloat16" in mine["float8"]["message"]
    assert "SUM" in mine["sparse_max"]["message"]
    assert [r["after"] for r in got] == [[2.0, 2.0], [2.0, 2.0]]
