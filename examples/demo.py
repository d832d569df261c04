"""A torch.distributed program that runs on accord by changing one import.

Run it under a launcher that sets the env:// contract (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), or directly: ``python examples/demo.py --nproc 4`` starts the processes itself.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import numpy as np

import accord as dist  # was: import torch.distributed as dist


def main() -> None:
    dist.init_process_group(backend="gloo")  # env:// by default; "gloo" names accord's CPU backend
    rank, world = dist.get_rank(), dist.get_world_size()

    # all_reduce, the docs' example: every rank ends with the sum
    tensor = np.arange(2, dtype=np.int64) + 1 + 2 * rank
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    # broadcast a 1 MiB block from the last rank
    block = np.full(1 << 18, rank, dtype=np.float32)
    dist.broadcast(block, src=world - 1)

    # pass a token around the ring with send/recv
    token = np.zeros(1, dtype=np.int64)
    if rank == 0:
        token[0] = 1
        dist.send(token, dst=1 % world)
        dist.recv(token, src=world - 1)
    else:
        dist.recv(token, src=rank - 1)
        token += 1
        dist.send(token, dst=(rank + 1) % world)

    # time a small and a large all_reduce
    small, large = np.zeros(2, dtype=np.float32), np.zeros(4 << 20, dtype=np.float32)
    timings = {}
    for name, data, iters in (("8 B", small, 200), ("16 MiB", large, 5)):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
        timings[name] = (time.perf_counter() - start) / iters * 1e6

    print(f"rank {rank}/{world}: all_reduce → {tensor.tolist()}, broadcast from rank {world - 1} → "
          f"{block[0]:.0f}, ring token → {token[0] if rank == 0 else '…'}, all_reduce 8 B "
          f"{timings['8 B']:.0f} µs, 16 MiB {timings['16 MiB'] / 1000:.1f} ms", flush=True)
    dist.destroy_process_group()


def launch(nproc: int) -> int:
    """Start ``nproc`` copies of this script with the env:// contract; return the first failure."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    codes = [p.wait(timeout=300) for p in procs]
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    if "RANK" in os.environ:
        main()
    else:
        parser = argparse.ArgumentParser(description=__doc__)
        parser.add_argument("--nproc", type=int, default=4, help="number of processes to start")
        sys.exit(launch(parser.parse_args().nproc))
