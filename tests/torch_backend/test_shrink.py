"""A DDP job on backend accord survives a lost rank in place: the survivors' backward raises
(it crashed the process before: DDP's reducer read a failed Future as its gradients), they
shrink the default group (``accord.integrations.torch.shrink_group``: torch's own
``shrink_group`` cannot reach a Python backend), rebuild DDP and train on with equal
parameters. gloo cannot shrink at all."""

from __future__ import annotations

import pytest

from . import harness

pytestmark = [pytest.mark.multiprocess, pytest.mark.torch, pytest.mark.timeout(120)]


def test_ddp_survivors_shrink_and_train_on() -> None:
    got = harness.run("ddp_shrink", "accord", 3, dies=(1,), victim=1)
    assert got[1] is None
    for old_rank, report in ((0, got[0]), (2, got[2])):
        assert report["caught"]["type"] == "RuntimeError", report
        assert "PeerError" in report["caught"]["message"] and "rank 1" in report["caught"]["message"], report
        assert report["torchs_own"]["type"] == "RuntimeError", report  # torch: no device backend
        assert (report["rank"], report["size"]) == ({0: 0, 2: 1}[old_rank], 2), report
        assert report["is_world"] and report["equal"], report
        assert report["shrunk_s"] < 1.0, report


def test_ddp_survivors_take_in_a_replacement_and_train_on() -> None:
    """World 3 (+ a newcomer); rank 1 dies; the survivors shrink, grow back to 3 taking in
    the newcomer (accord.integrations.torch.join_process_group), broadcast the model and
    train on: equal parameters everywhere."""
    got = harness.run("ddp_replace", "accord", 4, dies=(1,), victim=1, self_init=True)
    assert got[1] is None
    assert [got[r]["role"] for r in (0, 2, 3)] == ["survivor", "survivor", "newcomer"], got
    assert [(got[r]["rank"], got[r]["size"]) for r in (0, 2, 3)] == [(0, 3), (1, 3), (2, 3)], got
    assert all(got[r]["equal"] for r in (0, 2, 3)), got
    assert all(got[r]["changed_s"] < 5.0 for r in (0, 2)), got


def test_torchs_init_is_refused_in_a_process_that_is_to_join() -> None:
    """A replacement started by accordrun --replace-workers (ACCORD_JOIN=1) that calls
    torch.distributed.init_process_group is told at once to call join_process_group, rather
    than waiting out torch's timeout for a world of ranks that never come."""
    (got,) = harness.run("init_when_joining", "accord", 1, self_init=True)
    assert got["type"] == "ValueError", got
    assert "accord.integrations.torch.join_process_group()" in got["message"], got


def test_fsdp2_survivors_shrink_and_train_on_from_a_checkpoint() -> None:
    """FSDP2 on 3 ranks; rank 2 dies; the survivors' step raises, they shrink, shard the
    last checkpoint over the 2 of them and train on with equal parameters."""
    got = harness.run("fsdp2_shrink", "accord", 3, dies=(2,), victim=2)
    assert got[2] is None
    for report in got[:2]:
        assert report["caught"]["type"] is not None, report  # (the lost rank's error, not a hang)
        assert report["size"] == 2 and report["equal"], report
        assert all(loss == loss for loss in report["losses"]), report  # (no NaN)
