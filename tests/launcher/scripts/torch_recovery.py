"""A torch DDP job on backend accord that goes on when a rank is lost (test_replace.py runs it
under accordrun --replace-workers): a replacement (ACCORD_JOIN=1) joins with
accord.integrations.torch.join_process_group — torch's own init_process_group cannot join —
and the survivors shrink and grow through accord.integrations.torch.

Lines it prints: ``TRAINING rank=r pid=p joined=0|1``, ``GROWN rank=r`` (a survivor, after
grow_group), ``PARAMS rank=r same=1|0 steps=n`` at the end. STEPS=n: steps to train.
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import accord.integrations.torch as accord_torch


def sync(model: nn.Module, step: torch.Tensor) -> None:
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)
    dist.broadcast(step, src=0)


def main() -> None:
    joining = os.environ.get("ACCORD_JOIN") == "1"
    if joining:
        accord_torch.join_process_group()
    else:
        dist.init_process_group("accord")
    torch.manual_seed(0)
    model, step = nn.Linear(8, 1), torch.zeros(1)
    sync(model, step)
    ddp, opt = DDP(model), torch.optim.SGD(model.parameters(), lr=0.01)
    print(f"TRAINING rank={dist.get_rank()} pid={os.getpid()} joined={int(joining)}", flush=True)
    world_size = int(os.environ["WORLD_SIZE"])
    while step.item() < int(os.environ.get("STEPS", "1000")):
        seed = dist.get_rank() * 100000 + int(step.item())
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))
        try:
            opt.zero_grad()
            ddp(x).sum().backward()
        except RuntimeError as exc:  # DDP's reducer: "... PeerError: ... rank 1 is gone ..."
            if "PeerError" not in str(exc):
                raise
            accord_torch.shrink_group(accord_torch.lost_ranks())
            accord_torch.grow_group(world_size)
            print(f"GROWN rank={dist.get_rank()}", flush=True)
            sync(model, step)
            ddp, opt = DDP(model), torch.optim.SGD(model.parameters(), lr=0.01)
            continue
        opt.step()
        step += 1
        time.sleep(0.003)
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    same = all(torch.equal(everyone[0], each) for each in everyone)
    print(f"PARAMS rank={dist.get_rank()} same={int(same)} steps={int(step.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
