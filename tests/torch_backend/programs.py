"""torch programs that run unchanged on any backend (harness.run picks it): training with DDP,
FSDP2, FSDP1, a 2-D DeviceMesh, DTensor redistribution, functional collectives. Each returns
plain data (losses, parameters as lists) for the test to compare between gloo and accord.

Inputs derive from the rank and a fixed seed, so both backends see the same data.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn


def _params(model: nn.Module) -> dict[str, list[float]]:
    return {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}


class _WithBatchNorm(nn.Module):
    """BatchNorm (buffers DDP broadcasts) and a parameter no step uses (find_unused)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def ddp_train(rank: int, world_size: int, steps: int = 6, hook: str = "", accumulate: int = 2,
              static_graph: bool = False) -> dict[str, Any]:
    """DDP with BatchNorm buffers, an unused parameter, an optional comm hook and no_sync
    gradient accumulation; returns per-step losses, final parameters and buffers."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(_WithBatchNorm(), find_unused_parameters=not static_graph, static_graph=static_graph)
    if hook == "allreduce":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            x = torch.randn(4, 8, generator=gen)
            y = torch.randn(4, 4, generator=gen)
            if micro < accumulate - 1:
                with model.no_sync():
                    nn.functional.mse_loss(model(x), y).backward()
            else:
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                losses.append(loss.item())
        opt.step()
    module = model.module
    return {"losses": losses, "params": _params(module),
            "running_mean": module.bn.running_mean.tolist()}


def ddp_sparse_embedding(rank: int, world_size: int, steps: int = 4) -> dict[str, Any]:
    """DDP over an embedding with sparse gradients (all_reduce of sparse COO tensors)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(nn.Embedding(20, 3, sparse=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        ids = torch.tensor([(rank * 3 + step) % 20, (rank + 7 * step) % 20, 5])
        loss = model(ids).pow(2).sum()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {"losses": losses, "params": _params(model.module)}


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def _train(model: nn.Module, rank: int, steps: int) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(200 + rank)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        x, y = torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def fsdp2_train(rank: int, world_size: int, steps: int = 5, mesh_shape: tuple = ()) -> dict[str, Any]:
    """FSDP2 (fully_shard) on a 1-D mesh, or HSDP on a 2-D (replicate, shard) mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    shape = tuple(mesh_shape) or (world_size,)
    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    model = _mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = _train(model, rank, steps)
    full = {name: p.full_tensor().reshape(-1).tolist() for name, p in model.named_parameters()}
    return {"losses": losses, "params": full}


def fsdp1_train(rank: int, world_size: int, steps: int = 5) -> dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    model = FSDP(_mlp(), device_id=torch.device("cpu"), use_orig_params=True)
    losses = _train(model, rank, steps)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        state = model.state_dict()
    return {"losses": losses, "params": {k: v.reshape(-1).tolist() for k, v in state.items()}}


def device_mesh_2d(rank: int, world_size: int) -> dict[str, Any]:
    """A (2, world/2) mesh: all_reduce along each dimension, group names and ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "tp"))
    out: dict[str, Any] = {}
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=group)
        out[dim] = {"sum": t.item(), "ranks": dist.get_process_group_ranks(group),
                    "backend": str(dist.get_backend(group)),
                    "local_rank": mesh.get_local_rank(dim)}
    return out


def dtensor_redistribute(rank: int, world_size: int) -> dict[str, Any]:
    """Shard → replicate → shard(1) → partial → replicate of a DTensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world_size,))
    full = torch.arange(4.0 * world_size * 3).reshape(4 * world_size, 3)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    replicated = sharded.redistribute(mesh, [Replicate()])
    col = replicated.redistribute(mesh, [Shard(1)])
    partial = replicated.redistribute(mesh, [Partial()])
    summed = partial.redistribute(mesh, [Replicate()])
    return {"local_shard": sharded.to_local().tolist(), "replicated": replicated.to_local().tolist(),
            "col_shard": col.to_local().tolist(), "summed": summed.to_local().tolist()}


def functional_collectives(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    t = torch.arange(4.0) + rank
    return {
        "all_reduce": funcol.all_reduce(t, "sum", group).tolist(),
        "all_gather": funcol.all_gather_tensor(t, 0, group).tolist(),
        "reduce_scatter": funcol.reduce_scatter_tensor(
            torch.arange(2.0 * world_size), "sum", 0, group).tolist(),
        "all_to_all": funcol.all_to_all_single(torch.arange(1.0 * world_size) + 10 * rank,
                                               None, None, group).tolist(),
        "broadcast": funcol.broadcast(t, 0, group).tolist(),
    }


def async_overlap(rank: int, world_size: int) -> dict[str, Any]:
    """Async calls return before they finish; waits, futures and then() behave."""
    big = torch.full((1 << 20,), float(rank + 1))
    work = dist.all_reduce(big, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0][:2] * 2)
    work.wait()
    small = torch.ones(3)
    dist.all_reduce(small)  # a blocking call after an async one: in order
    return {"big": big[:2].tolist(), "completed": work.is_completed(), "success": work.is_success(),
            "chained": chained.wait().tolist(), "small": small.tolist()}
