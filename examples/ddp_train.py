"""A plain torch DDP training script on the accord backend: the only change from gloo is the
backend's name.

    accordrun --nproc-per-node 2 examples/ddp_train.py            # accord's launcher
    torchrun --nproc-per-node 2 examples/ddp_train.py             # torch's launcher
    accordrun --nproc-per-node 2 examples/ddp_train.py --backend gloo   # the same on gloo

It never imports accord: ``pip install accord`` registers the backend with torch (a
``torch.backends`` entry point), so ``init_process_group("accord")`` just works. Every rank
prints its loss per step; the losses are the same as on gloo.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="accord", help="accord (default) or gloo")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    dist.init_process_group(args.backend)  # env://, as set by accordrun or torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts it)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1234 + rank)  # each rank its own shard of data
    for step in range(args.steps):
        x, y = torch.randn(8, 16, generator=data), torch.randn(8, 4, generator=data)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP all_reduces the gradients on the backend, overlapped with backward
        opt.step()
        print(f"rank {rank}/{world} step {step} loss {loss.item():.6f} ({dist.get_backend()})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
