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

from . import harness  # noqa: E402

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


def same_as_gloo(program: str, world_size: int, **kwargs: Any) -> list[Any]:
    expected = harness.run(program, "gloo", world_size, **kwargs)
    got = harness.run(program, "accord", world_size, **kwargs)
    problems = [f"rank {r}{d}" for r, (e, g) in enumerate(zip(expected, got)) for d in close(e, g)]
    assert not problems, f"{program} on accord differs from gloo:\n  " + "\n  ".join(problems[:20])
    return got


@pytest.mark.parametrize("hook", ["", "allreduce", "fp16"])
def test_ddp_trains_as_on_gloo(hook: str) -> None:
    got = same_as_gloo("ddp_train", 2, hook=hook)
    assert len(got[0]["losses"]) == 6
    assert got[0]["params"] == got[1]["params"]  # replicas stay identical


def test_ddp_static_graph_and_world_3() -> None:
    same_as_gloo("ddp_train", 3, static_graph=True, accumulate=1)


def test_ddp_with_sparse_embedding_gradients() -> None:
    got = same_as_gloo("ddp_sparse_embedding", 2)
    assert got[0]["params"] == got[1]["params"]


def test_fsdp2_trains_as_on_gloo() -> None:
    same_as_gloo("fsdp2_train", 2)


def test_hsdp_on_a_2d_mesh_trains_as_on_gloo() -> None:
    same_as_gloo("fsdp2_train", 4, mesh_shape=(2, 2))


def test_fsdp1_trains_as_on_gloo() -> None:
    same_as_gloo("fsdp1_train", 2)


def test_2d_device_mesh_groups() -> None:
    expected = harness.run("device_mesh_2d", "gloo", 4)
    got = harness.run("device_mesh_2d", "accord", 4)
    for rank, (e, g) in enumerate(zip(expected, got)):
        for dim in ("dp", "tp"):
            assert g[dim]["backend"] == "accord" and e[dim]["backend"] == "gloo"
            assert {**g[dim], "backend": "gloo"} == e[dim], (rank, dim)


def test_dtensor_redistribution() -> None:
    same_as_gloo("dtensor_redistribute", 2)


def test_functional_collectives() -> None:
    same_as_gloo("functional_collectives", 2)


def test_async_work_and_futures() -> None:
    got = same_as_gloo("async_overlap", 2)
    assert got[0] == {"big": [3.0, 3.0], "completed": True, "success": True,
                      "chained": [6.0, 6.0], "small": [2.0, 2.0, 2.0]}
