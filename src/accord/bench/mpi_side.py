"""The benchmark's MPI side: the same plan run under mpiexec, on MPICH through mpi4py, or
on accord's API with backend "mpi" (``accord bench --backend mpi``).

Owns: launching ``mpiexec -n N python -m accord.bench.mpi_side`` with the plan, the MPI calls
that match each collective of ``workloads`` (same sizes, float32, in place where MPI allows),
and reading the timings back (one JSON line per row on the worker's stdout). Needs the
``bench`` extra (mpi4py, mpich). Must not know about reporting.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from .runner import Plan
from .workloads import COLLECTIVES, per_rank_count


def mpiexec() -> str:
    found = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(found):
        raise RuntimeError("--compare mpi needs mpiexec: pip install 'accord[bench]' (mpi4py and mpich)")
    return found


def run(plan: Plan, on_row: Callable[..., None], timeout: float = 600.0, impl: str = "mpi") -> None:
    """Run ``plan`` under mpiexec: raw mpi4py calls (``impl`` "mpi"), or accord's API on
    backend "mpi" (``impl`` "accord"); call ``on_row(impl, op, nbytes, per_rank_times)`` per row."""
    cmd = [
        mpiexec(),
        "-n",
        str(plan.world),
        sys.executable,
        "-m",
        "accord.bench.mpi_side",
        json.dumps(asdict(plan)),
        impl,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the MPI benchmark failed ({done.returncode}):\n{done.stderr[-2000:]}")
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            on_row(impl, row["op"], row["nbytes"], row["times"])


def _call(comm: Any, mpi: Any, op: str, count: int, world: int) -> Callable[[], None]:
    data = np.zeros(count, dtype=np.float32)
    big = np.zeros(count * world, dtype=np.float32)
    received = np.zeros(count * world, dtype=np.float32)  # (allocated once, as accord's rows)
    calls: dict[str, Callable[[], Any]] = {
        "all_reduce": lambda: comm.Allreduce(mpi.IN_PLACE, data),
        "broadcast": lambda: comm.Bcast(data, root=0),
        "barrier": comm.Barrier,
        "reduce": lambda: comm.Reduce(data, big[:count], root=0),
        "all_gather": lambda: comm.Allgather(data, big),
        "gather": lambda: comm.Gather(data, big, root=0),
        "scatter": lambda: comm.Scatter(big, data, root=0),
        "reduce_scatter": lambda: comm.Reduce_scatter_block(big, data),
        "all_to_all": lambda: comm.Alltoall(big, received),
        "all_reduce_async": lambda: comm.Iallreduce(mpi.IN_PLACE, data).Wait(),
        "broadcast_async": lambda: comm.Ibcast(data, root=0).Wait(),
        "all_gather_async": lambda: comm.Iallgather(data, big).Wait(),
    }
    for form in ("all_gather", "reduce_scatter", "all_to_all"):  # MPI's calls take one buffer
        calls[f"{form}_list"] = calls[form]
    if op not in calls:
        raise ValueError(f"no MPI equivalent for {op!r}")
    return calls[op]


def _rows(plan: Plan, impl: str = "mpi") -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    api: Any = None
    if impl == "accord":  # accord's API on backend mpi, timed as the accord workers time it
        import accord as api

        from .workloads import make_call

        api.init_process_group("mpi")
    for op in plan.ops:
        if not COLLECTIVES[op].runs_on(impl, False):
            continue  # a DDP step: torch.distributed's API only; a ceiling: accord's own run
        sizes = plan.sizes if COLLECTIVES[op].sized else [0]
        for nbytes in sizes:
            count = per_rank_count(op, nbytes, plan.world, 4) if nbytes else 1
            call = (
                make_call(api, op, count, comm.rank, plan.world, None)
                if api is not None
                else _call(comm, MPI, op, count, plan.world)
            )
            iters = plan.iters if nbytes < (4 << 20) else max(plan.iters // 4, 5)
            for _ in range(plan.warmup):
                call()
            comm.Barrier()
            times = []
            separate = plan.timing == "barrier"  # OSU style: each call timed alone
            for _ in range(iters):
                if separate:
                    comm.Barrier()
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            everyone = comm.gather(times, root=0)
            if comm.rank == 0:
                print(json.dumps({"op": op, "nbytes": nbytes, "times": everyone}), flush=True)

    if api is not None:
        api.destroy_process_group()


if __name__ == "__main__":
    _rows(Plan(**json.loads(sys.argv[1])), sys.argv[2] if len(sys.argv) > 2 else "mpi")
