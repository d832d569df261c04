"""A torch.distributed (gloo) program: all_reduce of rank-derived values. Under accordrun it
joins the launcher's store as under torchrun (accord's store speaks torch's protocol).

  FAIL_RANK=r   rank r raises ValueError on attempt 0 (TORCHELASTIC_RESTART_COUNT=0)
"""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
data = torch.ones(2) * (rank + 1)
dist.all_reduce(data)
if attempt == 0 and rank == int(os.environ.get("FAIL_RANK", "-1")):
    raise ValueError(f"rank {rank} fails on purpose")
print(f"TORCH rank={rank} attempt={attempt} sum={data.tolist()}", flush=True)
dist.destroy_process_group()
