"""One rank is late to an all_reduce (for ``accord top``): every rank does one all_reduce,
prints READY, then rank SLOW_RANK (default 2) sleeps SLEEP seconds (default 60) before the
second all_reduce, which the others enter at once. TORCH=1: through torch.distributed's
backend "accord" instead of accord's own API."""

import os
import time

import numpy as np

slow, pause = int(os.environ.get("SLOW_RANK", "2")), float(os.environ.get("SLEEP", "60"))
if os.environ.get("TORCH") == "1":
    import torch
    import torch.distributed as dist

    import accord.integrations.torch  # noqa: F401 — registers the "accord" backend

    dist.init_process_group("accord")
    data = torch.ones(4)
else:
    import accord as dist

    dist.init_process_group()
    data = np.ones(4, dtype=np.float32)
rank = dist.get_rank()
dist.all_reduce(data)
print(f"READY {rank} {os.getpid()}", flush=True)
if rank == slow:
    time.sleep(pause)
dist.all_reduce(data)
print(f"DONE {rank}", flush=True)
dist.destroy_process_group()
