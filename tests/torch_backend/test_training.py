"""Differential: torch programs train the same on backend "accord" as on gloo.

DDP (BatchNorm buffers, an unused parameter, comm hooks, no_sync accumulation, static
graph, sparse embedding gradients), FSDP2 (1-D, and HSDP on a 2-D mesh), FSDP1, a 2-D
DeviceMesh, DTensor redistribution, functional collectives and async overlap: per-step
losses and final parameters as gloo's (equal up to float rounding of a different summation
order at 4 ranks).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(600)]


def close(expected: Any, got: Any, path: str = "") -> list[str]:
    """Where two results differ beyond float rounding (rel 1e-5)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if expected.keys() != got.keys():
            return [f"{path}: keys {sorted(expected)} vs {sorted(got)}"]
        return [d for k in expected for d in close(expected[k], got[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{path}: length {len(expected)} vs {len(got)}"]
        return [d for i, (e, g) in enumerate(zip(expected, got)) for d in close(e, g, f"{path}[{i}]")]
    if isinstance(expected, float) and isinstance(got, float):
        return [] if math.isclose(expected, got, rel_tol=1e-5, abs_tol=1e-7) else \
            [f"{path}: {expected!r} vs {got!r}"]
    return [] if expected == got else [f"{path}: {expected!r} vs {got!r}"]


def same_as_gloo(jobs: Any, label: str, world_size: int = 2) -> list[Any]:
    expected = [r[label] for r in jobs("gloo", world_size)]
    got = [r[label] for r in jobs("accord", world_size)]
    problems = [f"rank {r}{d}" for r, (e, g) in enumerate(zip(expected, got)) for d in close(e, g)]
    assert not problems, f"{label} on accord differs from gloo:\n  " + "\n  ".join(problems[:20])
    return got


@pytest.mark.parametrize("label", ["ddp", "ddp_allreduce_hook", "ddp_fp16_hook",
                                   "ddp_powersgd_hook"])
def test_ddp_trains_as_on_gloo(jobs: Any, label: str) -> None:
    got = same_as_gloo(jobs, label)
    assert len(got[0]["losses"]) == 6
    assert got[0]["params"] == got[1]["params"]  # replicas stay identical


def test_ddp_static_graph_at_world_4(jobs: Any) -> None:
    same_as_gloo(jobs, "ddp_static", 4)


def test_ddp_with_sparse_embedding_gradients(jobs: Any) -> None:
    got = same_as_gloo(jobs, "ddp_sparse")
    assert got[0]["params"] == got[1]["params"]


def test_fsdp2_trains_as_on_gloo(jobs: Any) -> None:
    same_as_gloo(jobs, "fsdp2")


def test_hsdp_on_a_2d_mesh_trains_as_on_gloo(jobs: Any) -> None:
    same_as_gloo(jobs, "hsdp", 4)


def test_fsdp1_trains_as_on_gloo(jobs: Any) -> None:
    same_as_gloo(jobs, "fsdp1")


def test_2d_device_mesh_groups(jobs: Any) -> None:
    expected = [r["mesh_2d"] for r in jobs("gloo", 4)]
    got = [r["mesh_2d"] for r in jobs("accord", 4)]
    for rank, (e, g) in enumerate(zip(expected, got)):
        for dim in ("dp", "tp"):
            assert g[dim]["backend"] == "accord" and e[dim]["backend"] == "gloo"
            assert {**g[dim], "backend": "gloo"} == e[dim], (rank, dim)


def test_dtensor_redistribution(jobs: Any) -> None:
    same_as_gloo(jobs, "dtensor")


def test_functional_collectives(jobs: Any) -> None:
    same_as_gloo(jobs, "functional")


def test_coalesced_forms(jobs: Any) -> None:
    got = same_as_gloo(jobs, "coalesced")
    assert got[0]["all_gather_coalesced"] == [[[0.0, 0.0], [10.0] * 3], [[1.0, 1.0], [11.0] * 3]]


def test_async_work_and_futures(jobs: Any) -> None:
    got = same_as_gloo(jobs, "async")
    assert got[0] == {"big": [3.0, 3.0], "completed": True, "success": True,
                      "chained": [6.0, 6.0], "small": [2.0, 2.0, 2.0]}


@pytest.mark.parametrize("world_size", [2, 4])
def test_async_patterns_as_on_gloo(jobs: Any, world_size: int) -> None:
    """Reverse-order waits, queued calls then a blocking one, a polled call nobody waits
    for, a temporary tensor, functional waits, and a p2p exchange across an async call."""
    label = "async_patterns" if world_size == 2 else "async_patterns_4"
    got = same_as_gloo(jobs, label, world_size)
    n = world_size
    for rank, result in enumerate(got):
        assert result["polled"] == [True, [n * (n + 1) / 2] * 2]
        assert result["temporary"] == [2.0 * n] * 5
        assert result["crossed"] == [[n * (n + 1) / 2] * 2, 7.0 if rank == 0 else 0.0]
