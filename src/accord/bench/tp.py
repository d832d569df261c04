"""``accord bench --tp``'s jobs: tensor-parallel greedy decoding (``decoder``) on real processes,
each token timed, a few more profiled for their communication.

Owns: one job per implementation — "accord" and "gloo" (torch.distributed on that backend,
torch's DeviceMesh and ``parallelize_module`` over ``world`` processes), "free" (accord's,
its per-token collectives made free once the model is sharded: TP's own cost, ``free_comm``),
"sync" (the same, each collective one barrier of accord's: only the wait for every rank)
and "one" (one process, the model unsharded, no torch.distributed) — spawning its workers (a
free port each job, env://), the decoding loop (prefill, warm-up tokens, timed tokens, then
profiled tokens, each inside a ``tp:token`` event), and sending back per rank the token
times, the communication measured by ``tp_profile`` and the token ids. Must not know about
formatting.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, cast

from .runner import free_port
from .shape import DecoderConfig

#: torch.distributed on backend accord; on gloo; on accord with free communication (the
#: floor of tensor parallelism); with accord's barrier for each collective (only the wait
#: for every rank); one process without tensor parallelism
IMPLEMENTATIONS = ("accord", "gloo", "free", "sync", "one")
#: implementations whose tokens are not the model's (their sums are wrong on purpose)
WRONG_SUMS = ("free", "sync")
#: implementations whose collectives do not make the ranks wait for each other (no skew)
UNSYNCED = ("free",)


@dataclass
class TpPlan:
    config: DecoderConfig
    world: int = 2
    prompt: int = 16
    tokens: int = 64
    warmup: int = 8
    profiled: int = 16
    #: torch's intra-op threads in each process
    threads: int = 1
    env: dict[str, str] = field(default_factory=dict)

    def sized(self) -> DecoderConfig:
        """The config with a KV cache that holds the prompt and every token decoded."""
        length = self.prompt + self.warmup + self.tokens + self.profiled + 1
        return DecoderConfig(**{**asdict(self.config), "max_seq": length})


@dataclass
class RankResult:
    times: list[float]
    comm: dict[str, Any]
    tokens: list[int]
    #: (issued, done) of each profiled collective, µs of the host's wall clock
    spans: list[tuple[float, float]] = field(default_factory=list)


def _model(impl: str, plan: TpPlan, torch: Any) -> Any:
    from . import decoder

    cfg = plan.sized()
    model = decoder.build(cfg)
    if impl == "one":
        return model
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    dist.init_process_group(backend="accord" if impl in WRONG_SUMS else impl)
    cfg.check(dist.get_world_size())
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    sharded = parallelize_module(model, mesh, decoder.tp_plan())
    if impl in WRONG_SUMS:
        from . import free_comm

        free_comm.install(sync=impl == "sync")  # (after the sharding: its scatters were real)
    return sharded


def decode_and_time(impl: str, plan: TpPlan, report: Any = None) -> RankResult:
    """This process's part of one job: the decoding, timed and then profiled. The result goes
    to ``report`` (if given) before the group is destroyed: gloo now and then aborts in its
    teardown ("terminate called without an active exception"), after the numbers are in."""
    import torch

    from . import decoder, tp_profile

    torch.set_num_threads(plan.threads)
    model = _model(impl, plan, torch)
    cfg = plan.sized()
    total = plan.warmup + plan.tokens + plan.profiled + 1
    steps = decoder.decode(model, decoder.prompt(cfg, plan.prompt), total)
    tokens = [next(steps) for _ in range(plan.warmup + 1)]  # the prompt's forward, warm-up
    if impl != "one":
        torch.distributed.barrier()
    times, clock = [], time.perf_counter
    for _ in range(plan.tokens):
        start = clock()
        tokens.append(next(steps))
        times.append(clock() - start)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=tp_profile.every_thread(torch)
    ) as prof:
        for _ in range(plan.profiled):
            with torch.profiler.record_function(tp_profile.TOKEN_EVENT):
                tokens.append(next(steps))
    events = tp_profile.events_of(prof)
    result = RankResult(times, asdict(tp_profile.token_comm(events)), tokens, tp_profile.spans(events))
    if report is not None:
        report(result)
    if impl != "one":
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return result


def worker(impl: str, rank: int, plan: TpPlan, port: int, conn: Any) -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no lines per profile (torch not loaded yet)
    os.environ.update(plan.env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(plan.world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(plan.world),
        OMP_NUM_THREADS=str(plan.threads),
    )
    try:
        decode_and_time(impl, plan, lambda result: conn.send(("done", result)))
    except BaseException:  # noqa: BLE001 — reported to the parent
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run(impl: str, plan: TpPlan, timeout: float = 600.0) -> list[RankResult]:
    """Run one job of ``impl``; every rank's result, in rank order."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(IMPLEMENTATIONS)}")
    world = 1 if impl == "one" else plan.world
    ctx = mp.get_context("spawn")
    port = free_port()
    job = TpPlan(**{**plan.__dict__, "world": world})
    readers, procs = {}, []
    for rank in range(world):
        reader, writer = ctx.Pipe(duplex=False)
        procs.append(ctx.Process(target=worker, args=(impl, rank, job, port, writer), daemon=True))
        procs[-1].start()
        writer.close()
        readers[reader] = rank
    found: dict[int, RankResult] = {}
    give_up = time.monotonic() + timeout
    try:
        while readers:
            if time.monotonic() > give_up:
                raise RuntimeError(
                    f"tp decode on {impl}: ranks {sorted(readers.values())} sent no result in {timeout:.0f} s"
                )
            for ready in wait(list(readers), timeout=1.0):
                reader = cast("Connection[Any, Any]", ready)  # wait returns what it was given
                rank = readers.pop(reader)
                try:
                    kind, value = reader.recv()
                except EOFError:
                    procs[rank].join(1)
                    kind, value = "error", f"exited ({procs[rank].exitcode}) without a result"
                if kind == "error":
                    raise RuntimeError(f"tp decode on {impl}, rank {rank} failed:\n{value}")
                found[rank] = value
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return [found[r] for r in range(world)]
