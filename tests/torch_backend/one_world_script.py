"""One rank of a job whose program imports accord before torch (or never imports torch).

``python one_world_script.py numpy``: a NumPy-only program; prints whether torch was imported.
``python one_world_script.py late``: torch imported after accord's init_process_group; torch's
DDP must still find accord's world. Prints one JSON line (the test reads the last line).
Run with the env:// variables set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""

from __future__ import annotations

import json
import sys

import numpy as np

import accord as dist


def main() -> None:
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = np.array([rank + 1.0])
    dist.all_reduce(x)
    out: dict = {"sum": x.tolist(), "torch_after_init": "torch" in sys.modules}
    if mode == "late":
        import torch
        import torch.distributed as tdist

        torch.manual_seed(rank)
        model = torch.nn.Linear(3, 1)
        ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's params
        ddp(torch.full((2, 3), float(rank + 1))).sum().backward()
        out["torch_backend"] = tdist.get_backend()
        out["grad"] = model.weight.grad.reshape(-1).tolist()
        out["weight"] = model.weight.detach().reshape(-1).tolist()
    dist.destroy_process_group()
    out["torch_at_end"] = "torch" in sys.modules
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
