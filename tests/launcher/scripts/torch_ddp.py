"""A torch DDP training loop on gloo, printing each step's loss: the same under torchrun and
accordrun (the model, the data and gloo's sums are deterministic).

The model goes before destroy_process_group: DDP holds the process group, and a gloo group
that outlives it to interpreter exit can abort the process there (a worker thread that drops
a tensor needs the GIL while Python finalizes: "terminate called without an active
exception", 1 run in 20 under torchrun alone)."""

import gc

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(100 + rank)
inputs, targets = torch.randn(32, 8, generator=generator), torch.randn(32, 1, generator=generator)
for step in range(5):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    print(f"LOSS rank={rank} step={step} loss={loss.item():.6f}", flush=True)
del model, optimizer, loss
gc.collect()
dist.destroy_process_group()
