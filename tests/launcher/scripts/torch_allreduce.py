"""A torch.distributed (gloo) program, for accordrun with ACCORD_LAUNCHER_WORKER_STORE=rank0."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
data = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(data)
print(f"TORCH rank={dist.get_rank()} sum={data.tolist()}", flush=True)
dist.destroy_process_group()
