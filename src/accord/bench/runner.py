"""Run benchmark jobs: N worker processes per implementation, timings sent back to the parent.

Owns: spawning workers (multiprocessing, "spawn"), the env:// contract for them (a free port
per job), initialising accord or torch.distributed in each worker, timing every iteration,
and collecting the per-rank timings. Must not know about formatting.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .workloads import per_rank_count

#: accord's own API; torch.distributed on gloo; torch.distributed on backend "accord"
IMPLEMENTATIONS = ("accord", "gloo", "torch-accord")


@dataclass
class Plan:
    ops: list[str]
    sizes: list[int]
    iters: int
    warmup: int
    world: int
    env: dict[str, str] = field(default_factory=dict)
    timing: str = "loop"  # "barrier": a barrier before each timed call (OSU style)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _init(impl: str) -> tuple[Any, Any]:
    if impl == "accord":
        import accord

        accord.init_process_group()
        return accord, None
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group(backend="accord" if impl == "torch-accord" else impl)
    return tdist, torch


def _time_calls(call: Any, iters: int, warmup: int, api: Any, timing: str = "loop") -> list[float]:
    """Each call's time: back to back ("loop"), or each after a barrier ("barrier")."""
    for _ in range(warmup):
        call()
    api.barrier()
    times = []
    clock = time.perf_counter
    barrier = api.barrier if timing == "barrier" else None
    for _ in range(iters):
        if barrier is not None:
            barrier()
        start = clock()
        call()
        times.append(clock() - start)
    return times


def worker(impl: str, rank: int, plan: Plan, port: int, results: Any) -> None:
    from .workloads import COLLECTIVES, make_call

    os.environ.update(plan.env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(plan.world),
        LOCAL_RANK=str(rank),
    )
    try:
        api, torch = _init(impl)
        for op in plan.ops:
            if not COLLECTIVES[op].runs_on(impl, torch is not None):
                continue  # a DDP step needs torch.distributed's API; a ceiling runs once
            sizes = plan.sizes if COLLECTIVES[op].sized else [0]
            for nbytes in sizes:
                count = per_rank_count(op, nbytes, plan.world, 4) if nbytes else 1
                iters = plan.iters if nbytes < (4 << 20) else max(plan.iters // 4, 5)
                if COLLECTIVES[op].step:
                    iters = max(plan.iters // 10, 5)
                call = make_call(api, op, count, rank, plan.world, torch)
                times = _time_calls(call, iters, plan.warmup, api, plan.timing)
                results.put(("row", impl, rank, op, nbytes, times))
        api.barrier()
        api.destroy_process_group()
        results.put(("done", impl, rank, None, None, None))
    except BaseException:  # noqa: BLE001 — reported to the parent
        results.put(("error", impl, rank, traceback.format_exc(), None, None))


def run(
    impl: str, plan: Plan, on_row: Any = None, timeout: float = 600.0
) -> dict[tuple[str, int], list[list[float]]]:
    """Run ``plan`` on ``impl``; return {(op, nbytes): [times of rank 0, rank 1, …]}."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=worker, args=(impl, r, plan, port, results), daemon=True)
        for r in range(plan.world)
    ]
    for proc in procs:
        proc.start()
    rows: dict[tuple[str, int], list[list[float]]] = {}
    done = 0
    give_up = time.monotonic() + timeout
    try:
        while done < plan.world:
            kind, _, rank, a, b, c = results.get(timeout=max(1.0, give_up - time.monotonic()))
            if kind == "error":
                raise RuntimeError(f"{impl} rank {rank} failed:\n{a}")
            if kind == "done":
                done += 1
                continue
            entry = rows.setdefault((a, b), [[] for _ in range(plan.world)])
            entry[rank] = c
            if on_row is not None and all(entry):
                on_row(impl, a, b, entry)
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
    return rows
