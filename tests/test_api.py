"""The functional API's lifecycle in one process (world size 1) and its small helpers."""

from __future__ import annotations

import importlib.util
from datetime import timedelta

import numpy as np
import pytest

import accord as dist
from accord.backend_names import resolve_backend


@pytest.fixture
def world_of_one():
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=10))
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_single_rank_job_runs_every_call(world_of_one):
    x = np.arange(3.0)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    dist.broadcast(x, src=0)
    dist.barrier()
    assert x.tolist() == [0.0, 1.0, 2.0]
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "accord")
    assert dist.get_backend_config() == "cpu:accord"
    work = dist.all_reduce(x, async_op=True)
    assert work.wait() and work.result()[0] is x


def test_init_twice_is_refused_and_destroy_allows_a_new_world():
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(ValueError, match="twice"):
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    dist.destroy_process_group()
    assert not dist.is_initialized()
    store = dist.HashStore()
    for _ in range(2):  # the same store twice: each init uses its own generation of keys
        dist.init_process_group(backend="GLOO", store=store, rank=0, world_size=1)
        assert dist.get_backend() == "gloo"
        dist.destroy_process_group()


@pytest.mark.parametrize("kwargs,problem", [
    ({"store": "not a store", "rank": 0, "world_size": 0}, "rank and world_size"),
    ({"store": dist.HashStore(), "rank": 2, "world_size": 2}, "rank and world_size"),
    ({"store": dist.HashStore(), "init_method": "env://", "rank": 0, "world_size": 1}, "mutually exclusive"),
    ({"backend": "ucc", "store": dist.HashStore(), "rank": 0, "world_size": 1}, "not available"),
    ({"init_method": "bogus://x"}, "no rendezvous handler"),
    ({"init_method": "tcp://localhost", "rank": 0, "world_size": 1}, "host and a port"),
    ({"init_method": "tcp://localhost:1", "world_size": 1}, "rank"),
])
def test_bad_init_arguments(kwargs, problem):
    with pytest.raises((ValueError, RuntimeError), match=problem):
        dist.init_process_group(**kwargs)
    assert not dist.is_initialized()


def test_calls_before_init_name_the_fix():
    with pytest.raises(dist.NotInitializedError, match="init_process_group"):
        dist.all_reduce(np.ones(1))
    with pytest.raises(ValueError, match="init_process_group"):
        dist.get_rank()
    assert dist.GroupMember.WORLD is None and dist.get_pg_count() == 0


def test_backend_parses_like_torch():
    assert dist.Backend("GLOO") == "gloo" and isinstance(dist.Backend("gloo"), str)
    assert dist.Backend.NCCL == "nccl" and dist.Backend("Accord") == dist.Backend.ACCORD
    with pytest.raises(ValueError):
        dist.Backend(3)
    assert resolve_backend(None) == "accord" and resolve_backend("cpu:gloo,cuda:nccl") == "gloo"
    assert dist.is_backend_available("gloo") and not dist.is_backend_available("ucc")
    assert dist.is_backend_available("nccl") == dist.is_nccl_available() == dist.is_backend_available("cpu:gloo,cuda:nccl")
    assert dist.is_gloo_available()
    has_mpi4py = importlib.util.find_spec("mpi4py") is not None
    assert dist.is_mpi_available() == has_mpi4py == dist.is_backend_available("mpi")


def test_register_backend_and_init_with_it():
    made = []

    def create(store, rank, world_size, timeout):
        made.append((rank, world_size, timeout))
        return "plugin-group"

    dist.Backend.register_backend("toy_backend", create)
    with pytest.raises(ValueError, match="already registered"):
        dist.Backend.register_backend("toy_backend", create)
    assert dist.Backend("TOY_BACKEND") == "toy_backend"
    dist.init_process_group(backend="toy_backend", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=timedelta(seconds=7))
    try:
        assert made == [(0, 1, timedelta(seconds=7))]
        assert dist.GroupMember.WORLD == "plugin-group"
    finally:
        dist.destroy_process_group()


def test_register_rendezvous_handler_with_a_custom_scheme():
    store = dist.HashStore()

    def handler(url, **kwargs):
        assert "rank=0" in url and "world_size=1" in url
        yield store, 0, 1

    dist.register_rendezvous_handler("toyscheme", handler)
    with pytest.raises(RuntimeError, match="already registered"):
        dist.register_rendezvous_handler("toyscheme", handler)
    dist.init_process_group(init_method="toyscheme://anything", rank=0, world_size=1)
    try:
        assert dist.get_world_size() == 1 and store.num_keys() > 0
    finally:
        dist.destroy_process_group()


def test_torchelastic_and_node_local_rank(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert not dist.is_torchelastic_launched()
    with pytest.raises(RuntimeError, match="LOCAL_RANK"):
        dist.get_node_local_rank()
    assert dist.get_node_local_rank(fallback_rank=3) == 3
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert dist.is_torchelastic_launched() and dist.get_node_local_rank() == 2
