"""Programs that start their job through accord's API (``import accord as dist``) and then use
torch's own code — DDP, DeviceMesh, ``torch.distributed.*`` — which must find accord's world
as torch's default group (harness.run(..., self_init=True): the program calls init itself).

``seed_ddp_example`` is the documents' DDP example (the seed's "Basics"/debugging example:
TwoLinLayerNet, 20 backward passes) on CPU, with the one import swapped (``api="accord"``) or
not (``api="torch"``: torch.distributed on gloo), for the differential test.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as tdist
import torch.nn as nn


class TwoLinLayerNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(10, 10, bias=False)
        self.b = nn.Linear(10, 1, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x)


def _api(name: str) -> Any:
    if name == "accord":
        import accord as dist
    else:
        import torch.distributed as dist
    return dist


def seed_ddp_example(rank: int, world_size: int, backend: str, api: str) -> dict[str, Any]:
    """The documents' DDP example: grads after 20 backward passes, and the parameters (each
    rank starts from a model of its own seed: DDP's broadcast makes them rank 0's)."""
    dist = _api(api)
    dist.init_process_group(backend)  # env://
    torch.manual_seed(rank)
    model = TwoLinLayerNet()
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    inp = torch.randn(10, 10, generator=torch.Generator().manual_seed(100 + rank))
    for _ in range(20):
        output = ddp_model(inp)
        loss = output[0] + output[1]
        loss.sum().backward()
    result = {
        "grads": {n: p.grad.reshape(-1).tolist() for n, p in model.named_parameters()},
        "params": {n: p.detach().reshape(-1).tolist() for n, p in model.named_parameters()},
        "torch_backend": tdist.get_backend(),
    }
    dist.destroy_process_group()
    result["after_destroy"] = [tdist.is_initialized(), dist.is_initialized()]
    return result


def torch_calls(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """torch.distributed's functions, torch's new_group, accord's new_group and DeviceMesh,
    all after accord's init only."""
    import accord as dist
    from torch.distributed._functional_collectives import all_reduce as funcol_all_reduce
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group(backend)
    world = tdist.group.WORLD
    t = torch.full((4,), float(rank + 1))
    tdist.all_reduce(t)
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world_size)]
    tdist.all_gather(gathered, torch.tensor([rank, 10 * rank]))
    sub = tdist.new_group(list(range(world_size)))
    s = torch.tensor([rank + 1.0])
    tdist.all_reduce(s, group=sub)
    mine = dist.new_group(list(range(world_size)))  # accord's own subgroup, same world
    m = torch.tensor([2.0 ** rank])
    dist.all_reduce(m, group=mine)
    mesh = init_device_mesh("cpu", (world_size,))
    f = funcol_all_reduce(torch.tensor([rank * 3.0]), "sum", mesh)
    mesh_sum = torch.tensor([1.0])
    tdist.all_reduce(mesh_sum, group=mesh.get_group())
    out = {
        "rank": [tdist.get_rank(), dist.get_rank()],
        "size": [tdist.get_world_size(), dist.get_world_size()],
        "backend": tdist.get_backend(),
        "world_is_accords": getattr(world, "accord_group", None) is dist.GroupMember.WORLD,
        "all_reduce": t.tolist(),
        "all_gather": [g.tolist() for g in gathered],
        "torch_subgroup": s.tolist(),
        "accord_subgroup": m.tolist(),
        "funcol_on_mesh": f.tolist(),
        "mesh_group": mesh_sum.tolist(),
    }
    dist.destroy_process_group()
    return out


def destroy_and_reinit(rank: int, world_size: int, backend: str, folder: str) -> dict[str, Any]:
    """accord's destroy ends torch's default group; torch's destroy ends accord's world; init
    again works after each. Each round meets in a FileStore of its own (env:// again on the
    same port races with rank 0's store still serving its last clients: not what this tests)."""
    import accord as dist

    seen = []
    for round_ in range(3):
        url = f"file://{folder}/round{round_}"
        dist.init_process_group(backend, init_method=url, rank=rank, world_size=world_size)
        t = torch.tensor([float(rank + round_)])
        tdist.all_reduce(t)
        seen.append(t.item())
        if round_ == 1:
            tdist.destroy_process_group()  # torch's: accord's world ends too
        else:
            dist.destroy_process_group()  # accord's: torch's default group ends too
        seen.append([tdist.is_initialized(), dist.is_initialized()])
    return {"seen": seen}


def switched_off(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """With ACCORD_TORCH_DEFAULT_GROUP=0: torch's DDP raises torch's own ValueError."""
    import accord as dist

    dist.init_process_group(backend)
    try:
        torch.nn.parallel.DistributedDataParallel(TwoLinLayerNet())
        error = None
    except ValueError as exc:
        error = str(exc)
    t = torch.tensor([1.0])
    dist.all_reduce(t)  # accord's world is unaffected
    out = {"error": error, "torch_initialized": tdist.is_initialized(), "accord_sum": t.item()}
    dist.destroy_process_group()
    return out


def torch_initialized_first(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """torch's default group made by torch first (its own world on gloo): accord's init warns
    what to write instead, and leaves torch's group alone."""
    import accord as dist

    tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    torch_backend = tdist.get_backend()
    dist.destroy_process_group()
    still = tdist.is_initialized()
    tdist.destroy_process_group()
    return {"warnings": messages, "torch_backend": torch_backend, "torch_still_initialized": still}

