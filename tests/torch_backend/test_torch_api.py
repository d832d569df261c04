"""torch's API on backend "accord", beyond gloo: AVG and PREMUL_SUM, every element type,
strided views written back in place, async calls that return at once and finish in the
background (futures and then()), subgroups (DDP over one), group names and descriptions.

Most programs run in the jobs test_training's comparisons run in (shared_jobs.py:
ACCORD_PLAN after PLANS[2] in accord's world-2 job, and PLANS[4]); those that need a group
of their own start one each."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from . import harness  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(300)]


def test_avg_premul_sum_dtypes_and_views(accord_programs) -> None:
    got = accord_programs("ops_and_dtypes")
    for res in got:
        assert res["avg"] == [3.0, 6.0]
        assert res["premul_sum"] == [1.5, 3.0]
        assert res["torch.bool"] == ["True"] * 3
        assert res["torch.uint8"] == res["torch.int64"] == ["2"] * 3
        assert res["torch.float16"] == res["torch.bfloat16"] == ["2.0"] * 3
        assert res["torch.complex64"] == ["(2+0j)"] * 3
        assert res["strided_view"] == [2.0, 10.0, 18.0]


def test_async_calls_return_at_once_and_finish_in_the_background(accord_programs) -> None:
    got = accord_programs("async_returns_at_once")
    first = got[0]
    assert first["returned_s"] < 0.5 and first["pending_at_return"], first
    assert first["then"] == [3.0] and first["value"] == 3.0, first


@pytest.mark.timeout(600)  # (when it runs first, it starts test_training's world-4 jobs)
def test_subgroups_ddp_over_a_subgroup_and_names(jobs) -> None:
    """In the world-4 jobs of shared_jobs.PLANS (one per backend, shared with test_training:
    starting four processes that import torch and DDP takes most of a job's time)."""
    expected = [r["groups_and_names"] for r in jobs("gloo", 4)]
    got = [r["groups_and_names"] for r in jobs("accord", 4)]
    assert got == expected
    assert got[0]["evens"] == {"sum": 2.0, "desc": "evens", "size": 2, "name_is_str": True}


@pytest.mark.parametrize("kind", ["file", "tcp", "prefix-tcp"])
def test_rendezvous_over_the_store_torch_hands_over(tmp_path, kind: str) -> None:
    """init_process_group("accord", store=...) with torch's FileStore, TCPStore and a
    PrefixStore over one: no second store, no extra port."""
    got = harness.run("init_with_store", "accord", 2, self_init=True, kind=kind,
                      path=str(tmp_path / "store"), port=harness.free_port())
    assert got == [{"sum": 6.0}, {"sum": 6.0}]


def test_backend_methods_called_without_options_make_torchs_defaults(accord_programs) -> None:
    for got in accord_programs("backend_calls_without_options"):
        assert got == {"allgather": [[1.0, 1.0], [2.0, 2.0]], "base": [1.0, 1.0, 2.0, 2.0]}, got


def test_async_calls_leave_one_profiler_event_each_whoever_runs_them(accord_programs) -> None:
    """One event per call whoever runs it; an event spans the run, not the time the call
    waited in the queue (30 ms in waited_late), and ends when the run does."""
    for got in accord_programs("profiled_async"):
        counts, longest = got["counts"], got["longest_ms"]
        for label in ("waited", "future", "future_default", "functional", "blocking_default", "waited_late"):
            assert counts[label] == {"accord:all_reduce": 3}, (label, got)
        assert counts["gather_waited"] == {"accord:all_gather": 3}, got
        assert counts["general"] == {"accord:all_to_all": 3}, got
        assert 0 < longest["waited_late"] < 20, got  # the run only (the sleep is 30 ms)
        assert 0 < longest["future_default"] < 20, got  # ended by the worker's run, not at the profile's end


def test_ddp_gradient_all_reduce_overlaps_backward(accord_programs) -> None:
    """The queued async calls still start in the background when DDP asks for their
    Future: the first bucket is reduced before backward hands over the last one."""
    for got in accord_programs("ddp_overlap"):
        assert got["buckets"] > 2 and got["grads"]
        assert any(got["overlapped"]), got  # (any of 8 steps: a descheduled rank may delay one)
