"""torch programs that run unchanged on any backend (harness.run picks it): training with DDP,
FSDP2, FSDP1, a 2-D DeviceMesh, DTensor redistribution, functional collectives. Each returns
plain data (losses, parameters as lists) for the test to compare between gloo and accord.

Inputs derive from the rank and a fixed seed, so both backends see the same data.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn


def _params(model: nn.Module) -> dict[str, list[float]]:
    return {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}


class _WithBatchNorm(nn.Module):
    """BatchNorm (buffers DDP broadcasts) and a parameter no step uses (find_unused)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def ddp_train(rank: int, world_size: int, steps: int = 6, hook: str = "", accumulate: int = 2,
              static_graph: bool = False) -> dict[str, Any]:
    """DDP with BatchNorm buffers, an unused parameter, an optional comm hook and no_sync
    gradient accumulation; returns per-step losses, final parameters and buffers."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(_WithBatchNorm(), find_unused_parameters=not static_graph, static_graph=static_graph)
    if hook == "allreduce":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            x = torch.randn(4, 8, generator=gen)
            y = torch.randn(4, 4, generator=gen)
            if micro < accumulate - 1:
                with model.no_sync():
                    nn.functional.mse_loss(model(x), y).backward()
            else:
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                losses.append(loss.item())
        opt.step()
    module = model.module
    return {"losses": losses, "params": _params(module),
            "running_mean": module.bn.running_mean.tolist()}


def ddp_sparse_embedding(rank: int, world_size: int, steps: int = 4) -> dict[str, Any]:
    """DDP over an embedding with sparse gradients (all_reduce of sparse COO tensors)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(nn.Embedding(20, 3, sparse=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        ids = torch.tensor([(rank * 3 + step) % 20, (rank + 7 * step) % 20, 5])
        loss = model(ids).pow(2).sum()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {"losses": losses, "params": _params(model.module)}


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def _train(model: nn.Module, rank: int, steps: int) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(200 + rank)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        x, y = torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def fsdp2_train(rank: int, world_size: int, steps: int = 5, mesh_shape: tuple = ()) -> dict[str, Any]:
    """FSDP2 (fully_shard) on a 1-D mesh, or HSDP on a 2-D (replicate, shard) mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    shape = tuple(mesh_shape) or (world_size,)
    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    model = _mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = _train(model, rank, steps)
    full = {name: p.full_tensor().reshape(-1).tolist() for name, p in model.named_parameters()}
    return {"losses": losses, "params": full}


def fsdp1_train(rank: int, world_size: int, steps: int = 5) -> dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    model = FSDP(_mlp(), device_id=torch.device("cpu"), use_orig_params=True)
    losses = _train(model, rank, steps)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        state = model.state_dict()
    return {"losses": losses, "params": {k: v.reshape(-1).tolist() for k, v in state.items()}}


def device_mesh_2d(rank: int, world_size: int) -> dict[str, Any]:
    """A (2, world/2) mesh: all_reduce along each dimension, group names and ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "tp"))
    out: dict[str, Any] = {}
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=group)
        out[dim] = {"sum": t.item(), "ranks": dist.get_process_group_ranks(group),
                    "backend": str(dist.get_backend(group)),
                    "local_rank": mesh.get_local_rank(dim)}
    return out


def dtensor_redistribute(rank: int, world_size: int) -> dict[str, Any]:
    """Shard(0) → Replicate → Shard(1), and a Partial (sum) → Replicate, of DTensors."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world_size,))
    full = torch.arange(4.0 * world_size * 3).reshape(4 * world_size, 3)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    replicated = sharded.redistribute(mesh, [Replicate()])
    col = replicated.redistribute(mesh, [Shard(1)])
    partial = DTensor.from_local(torch.full((2, 2), float(rank + 1)), mesh, [Partial()])
    summed = partial.redistribute(mesh, [Replicate()])
    return {"local_shard": sharded.to_local().tolist(), "replicated": replicated.to_local().tolist(),
            "col_shard": col.to_local().tolist(), "summed": summed.to_local().tolist()}


def functional_collectives(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    t = torch.arange(4.0) + rank
    return {
        "all_reduce": funcol.all_reduce(t, "sum", group).tolist(),
        "all_gather": funcol.all_gather_tensor(t, 0, group).tolist(),
        "reduce_scatter": funcol.reduce_scatter_tensor(
            torch.arange(2.0 * world_size), "sum", 0, group).tolist(),
        "all_to_all": funcol.all_to_all_single(torch.arange(1.0 * world_size) + 10 * rank,
                                               None, None, group).tolist(),
        # rank r sends j + r + 1 elements to rank j; twice (accord plans the splits once)
        "all_to_all_uneven": [
            funcol.all_to_all_single(torch.arange(float(sum(ins))) + 10 * rank + k, outs, ins, group).tolist()
            for k in range(2)
            for ins, outs in [([j + rank + 1 for j in range(world_size)],
                               [rank + r + 1 for r in range(world_size)])]
        ],
        "broadcast": funcol.broadcast(t, 0, group).tolist(),
    }


def async_overlap(rank: int, world_size: int) -> dict[str, Any]:
    """Async calls return before they finish; waits, futures and then() behave."""
    big = torch.full((1 << 20,), float(rank + 1))
    work = dist.all_reduce(big, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0][:2] * 2)
    work.wait()
    small = torch.ones(3)
    dist.all_reduce(small)  # a blocking call after an async one: in order
    return {"big": big[:2].tolist(), "completed": work.is_completed(), "success": work.is_success(),
            "chained": chained.wait().tolist(), "small": small.tolist()}


def async_patterns(rank: int, world_size: int) -> dict[str, Any]:
    """The ways torch code uses async calls: waits in reverse order, a blocking call after
    queued ones, a call nobody waits for (polled), a temporary tensor held only by its Work,
    functional collectives with their waits, and a p2p exchange made after an async
    collective that the peer makes only after the exchange."""
    import time

    funcol = torch.ops._c10d_functional
    name = dist.group.WORLD.group_name
    n = world_size
    a, b = torch.full((3,), rank + 1.0), torch.arange(4.0) * (rank == n - 1)
    out, rs = torch.zeros(2 * n), torch.zeros(2)
    works = [dist.all_reduce(a, async_op=True), dist.broadcast(b, n - 1, async_op=True),
             dist.all_gather_into_tensor(out, torch.full((2,), float(rank)), async_op=True),
             dist.reduce_scatter_tensor(rs, torch.arange(2.0 * n) + rank, async_op=True),
             dist.barrier(async_op=True)]
    listed = [torch.zeros(2) for _ in range(n)]  # list forms, queued (accord: as short paths)
    single = torch.zeros(2 * n)
    scattered, swapped = torch.zeros(2), [torch.zeros(1) for _ in range(n)]
    works += [dist.all_to_all(swapped, [torch.full((1,), 10.0 * rank + j) for j in range(n)], async_op=True),
              dist.all_gather(listed, torch.full((2,), rank + 5.0), async_op=True),
              dist.reduce_scatter(scattered, [torch.full((2,), rank + 2.0 * j) for j in range(n)],
                                  async_op=True),
              dist.all_to_all_single(single, torch.arange(2.0 * n) + 10 * rank, [2] * n, [2] * n,
                                     async_op=True)]
    for work in reversed(works):
        work.wait()
    queued = [torch.full((2,), float(rank + i)) for i in range(4)]
    for t in queued:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    after = torch.ones(1)
    dist.all_reduce(after)  # in order after the queued ones
    polled = torch.full((2,), rank + 1.0)
    work = dist.all_reduce(polled, async_op=True)
    deadline = time.monotonic() + 10
    while not work.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    completed = work.is_completed()
    temporary = dist.all_reduce(torch.full((5,), 2.0), async_op=True)  # only the Work holds it
    temporary.wait()
    functional = funcol.wait_tensor(funcol.all_reduce(torch.full((2,), rank + 1.0), "sum", name))
    gathered = funcol.wait_tensor(funcol.all_gather_into_tensor(torch.full((2,), float(rank)), n, name))
    crossed = torch.full((2,), rank + 1.0)
    message = torch.zeros(1 << 16)
    if rank == 0:
        work = dist.all_reduce(crossed, async_op=True)
        dist.recv(message, src=1)
        work.wait()
    else:
        if rank == 1:
            dist.send(torch.full((1 << 16,), 7.0), dst=0)
        dist.all_reduce(crossed)
    return {"reverse": [a.tolist(), b.tolist(), out.tolist(), rs.tolist(), [t.tolist() for t in listed],
                        single.tolist(), scattered.tolist(), [t.tolist() for t in swapped]],
            "queued": [t.tolist() for t in queued], "after": after.tolist(),
            "polled": [completed, polled.tolist()], "temporary": temporary.result()[0].tolist(),
            "functional": [functional.tolist(), gathered.tolist()],
            "crossed": [crossed.tolist(), message[0].item()]}


def backend_calls_without_options(rank: int, world_size: int) -> dict[str, Any]:
    """The backend's gather methods called as torch's Python signatures allow, with no
    options object: each makes torch's default options itself (accord once named a class
    torch.distributed does not export, found by mypy)."""
    backend = dist.group.WORLD  # (with extended_api, the AccordProcessGroup itself)
    x = torch.full((2,), float(rank + 1))
    outs = [[torch.zeros(2) for _ in range(world_size)]]
    backend.allgather(outs, [x]).wait()
    flat = torch.zeros(2 * world_size)
    backend._allgather_base(flat, x).wait()
    return {"allgather": [t.tolist() for t in outs[0]], "base": flat.tolist()}


def profiled_async(rank: int, world_size: int) -> dict[str, Any]:
    """Under torch's profiler: which accord events each kind of call leaves, how many, and
    how long the longest was. An async call's event spans its run, on the thread that runs
    it: the waiter, or accord's worker, which torch records only when the profiler records
    every thread (``profile_all_threads``, all labels but the default-mode ones below).
    With torch's default, a call whose Future was asked for (the worker runs it) has its
    event opened by the asking thread and ended by the worker's run, one per call; a
    blocking call's event is its own thread's."""
    import time

    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import profile

    funcol = torch.ops._c10d_functional
    name = dist.group.WORLD.group_name
    t, out = torch.ones(4), torch.zeros(4 * world_size)
    ins = torch.arange(3 * world_size, dtype=torch.float32)
    outs = torch.zeros(3 * world_size)
    dist.all_reduce(t)  # plans made outside the profile
    dist.all_gather_into_tensor(out, t)

    def waited_late() -> None:
        work = dist.all_reduce(t, async_op=True)
        time.sleep(0.03)  # (the worker runs it meanwhile)
        work.wait()

    default_mode = {"future_default", "blocking_default"}
    calls = {
        "waited": lambda: dist.all_reduce(t, async_op=True).wait(),
        "future": lambda: dist.all_reduce(t, async_op=True).get_future().wait(),
        "future_default": lambda: dist.all_reduce(t, async_op=True).get_future().wait(),
        "functional": lambda: funcol.wait_tensor(funcol.all_reduce(t, "sum", name)),
        "gather_waited": lambda: dist.all_gather_into_tensor(out, t, async_op=True).wait(),
        "blocking_default": lambda: dist.all_reduce(t),
        "waited_late": waited_late,
        # (split sizes as a tensor: the general path, run_collective's queued form)
        "general": lambda: dist.all_to_all_single(
            outs, ins, torch.full((world_size,), 3), torch.full((world_size,), 3), async_op=True
        ).wait(),
    }
    counts: dict[str, dict[str, int]] = {}
    longest: dict[str, float] = {}
    for label, call in calls.items():
        every_thread = None if label in default_mode else _ExperimentalConfig(profile_all_threads=True)
        dist.barrier()
        with profile(experimental_config=every_thread) as prof:
            dist.barrier()  # (both ranks profiling: the first call waits for no profiler's start)
            for _ in range(3):
                call()
            time.sleep(0.03)  # (an event left open would end at the profile's end: 30 ms on)
        events = [e for e in prof.events() if e.name.startswith("accord:") and e.name != "accord:barrier"]
        names = [e.name for e in events]
        counts[label] = {n: names.count(n) for n in set(names)}
        longest[label] = max(((e.time_range.end - e.time_range.start) / 1e3 for e in events), default=0.0)
    return {"counts": counts, "longest_ms": longest}


def ddp_overlap(rank: int, world_size: int) -> dict[str, Any]:
    """DDP's gradient all_reduces run while backward still runs: in a comm hook that makes
    the default async all_reduce, the first bucket's call finishes before the last bucket is
    handed over (each bucket's layer takes milliseconds of backward)."""
    import time

    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    layers = [torch.nn.Linear(1024, 1024) for _ in range(6)]
    model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=1)
    submitted: list[float] = []
    finished: list[float] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # (DDP checks annotations)
        submitted.append(time.monotonic())
        future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def done(fut: Any) -> Any:
            finished.append(time.monotonic())
            return fut.value()[0]

        return future.then(done)

    model.register_comm_hook(None, hook)
    x = torch.randn(64, 1024)
    overlapped = []
    # 8 steps: on 2 cores one rank's backward often runs ahead of the other's, and then the
    # first bucket's call waits for the other rank past the last bucket (measured on the
    # tree before and after issue 27's refactor alike: 30-50 % of steps); 3 steps all did
    # so about one run in ten.
    for _ in range(8):
        submitted.clear()
        finished.clear()
        model(x).sum().backward()
        overlapped.append(len(submitted) > 2 and finished[0] < submitted[-1])
    grads_equal = all(torch.equal(p.grad, p.grad) for p in model.parameters())
    return {"buckets": len(submitted), "overlapped": overlapped, "grads": grads_equal}


def ddp_powersgd(rank: int, world_size: int, steps: int = 6) -> dict[str, Any]:
    """DDP with torch's PowerSGD comm hook, whose then() callbacks make more collectives on
    the same group (an async all_reduce waited inside a callback of another)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2, min_compression_rate=0.5)
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(1 + rank)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 32), torch.randn(16, 8)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": [p.sum().item() for p in model.parameters()]}


# -- diagnostics and bad input (through torch's API) ---------------------------------------

def _caught(fn: Any) -> dict[str, Any]:
    import time

    start = time.monotonic()
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 — described for the test
        return {"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
                "message": str(exc), "elapsed": time.monotonic() - start}
    return {"type": None, "elapsed": time.monotonic() - start}


def mismatched_ops(rank: int, world_size: int) -> dict[str, Any]:
    t = torch.ones(4)
    dist.all_reduce(t)  # call #1 agrees
    if rank == 0:
        return _caught(lambda: dist.all_reduce(t))
    return _caught(lambda: dist.broadcast(t, 0))


def dead_peer(rank: int, world_size: int) -> dict[str, Any]:
    import os

    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == world_size - 1:
        os._exit(3)  # dies without a word
    return _caught(lambda: dist.all_reduce(t))


def frozen_peer(rank: int, world_size: int) -> dict[str, Any]:
    """The last rank skips call #2 until the others have timed out in it (they say so on a
    store connection of their own: no fixed sleep to outlast the timeout), then leaves."""
    import os
    from datetime import timedelta

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timedelta(seconds=60))
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == world_size - 1:
        store.wait([f"frozen_peer/timed_out/{r}" for r in range(world_size - 1)])
        return {"type": None}
    report = _caught(lambda: dist.all_reduce(t))
    store.set(f"frozen_peer/timed_out/{rank}", "1")
    return report


def detail_size_mismatch(rank: int, world_size: int) -> dict[str, Any]:
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL: sizes differ → an error on every rank before any
    byte moves, and the group still works afterwards."""
    bad = _caught(lambda: dist.all_reduce(torch.ones(4 + rank)))
    t = torch.ones(2)
    dist.all_reduce(t)
    return {"bad": bad, "after": t.tolist()}


def bad_inputs(rank: int, world_size: int) -> dict[str, Any]:
    """Calls the backend cannot do: each raises on the calling rank, before anything is sent
    (so the other ranks, which call nothing, are not involved), and the group still works."""
    out = {}
    if rank == 0:
        out["meta_device"] = _caught(lambda: dist.all_reduce(torch.ones(2, device="meta")))
        dense = torch.eye(3)
        out["sparse_csr"] = _caught(lambda: dist.all_reduce(dense.to_sparse_csr()))
        out["float8"] = _caught(lambda: dist.all_reduce(torch.zeros(2, dtype=torch.float8_e4m3fn)))
        sparse = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (3,))
        out["sparse_max"] = _caught(lambda: dist.all_reduce(sparse, op=dist.ReduceOp.MAX))
        out["band_float"] = _caught(lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND))
    t = torch.ones(2)
    dist.all_reduce(t)
    out["after"] = t.tolist()
    return out


# -- accord-only behaviour through torch's API (gloo lacks it, or it is about timing) ------

def ops_and_dtypes(rank: int, world_size: int) -> dict[str, Any]:
    """AVG and PREMUL_SUM (gloo refuses both), and the element types gloo takes."""
    out: dict[str, Any] = {}
    t = torch.tensor([2.0, 4.0]) * (rank + 1)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["avg"] = t.tolist()
    t = torch.tensor([1.0, 2.0]) * (rank + 1)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    out["premul_sum"] = t.tolist()
    for dtype in (torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.float64, torch.complex64):
        t = torch.ones(3, dtype=dtype)
        dist.all_reduce(t)
        out[str(dtype)] = [str(v) for v in t.tolist()]
    view = torch.arange(12.0).reshape(3, 4)[:, 1]  # a strided view: written back in place
    dist.all_reduce(view)
    out["strided_view"] = view.tolist()
    return out


def async_returns_at_once(rank: int, world_size: int) -> dict[str, Any]:
    """Rank 1 joins the all_reduce a second late: rank 0's async call must return at once
    and finish in the background."""
    import time

    t = torch.full((1 << 16,), float(rank + 1))
    if rank == 1:
        time.sleep(1.0)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    returned = time.monotonic() - start
    pending = not work.is_completed()
    done = []
    work.get_future().then(lambda fut: done.append(fut.value()[0][0].item()))
    work.wait()
    deadline = time.monotonic() + 5
    while not done and time.monotonic() < deadline:  # the callback runs on the finishing thread
        time.sleep(0.01)
    return {"returned_s": returned, "pending_at_return": pending, "then": done,
            "value": t[0].item()}


def groups_and_names(rank: int, world_size: int) -> dict[str, Any]:
    """new_group, new_subgroups, DDP over a subgroup, group names and descriptions."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    out: dict[str, Any] = {}
    evens = dist.new_group([r for r in range(world_size) if r % 2 == 0], group_desc="evens")
    if rank % 2 == 0:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=evens)
        out["evens"] = {"sum": t.item(), "desc": evens.group_desc,
                        "size": dist.get_world_size(evens), "name_is_str": isinstance(evens.group_name, str)}
    mine, _ = dist.new_subgroups(group_size=2)
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 2), process_group=mine)
    loss = model(torch.ones(1, 4) * (rank + 1)).sum()
    loss.backward()
    out["ddp_subgroup_grad"] = model.module.weight.grad.reshape(-1).tolist()
    out["subgroup_ranks"] = dist.get_process_group_ranks(mine)
    return out


def init_with_store(rank: int, world_size: int, backend: str, kind: str, path: str = "",
                    port: int = 0) -> dict[str, Any]:
    """init_process_group(backend, store=...) with a store of torch's making."""
    from datetime import timedelta

    timeout = timedelta(seconds=60)
    if kind == "file":
        store = dist.FileStore(path, world_size)
    elif kind == "tcp":
        store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0, timeout)
    elif kind == "prefix-tcp":
        store = dist.PrefixStore("job7/", dist.TCPStore("127.0.0.1", port, world_size, rank == 0,
                                                        timeout))
    else:
        raise ValueError(kind)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    sub = dist.new_group(list(range(world_size)))
    dist.all_reduce(t, group=sub)
    return {"sum": t.item()}


def several(rank: int, world_size: int, plan: list) -> dict[str, Any]:
    """Run several programs in one process group, in order: ``plan`` is a list of
    (label, program name, kwargs), a name of this module or "package.module:function";
    returns {label: result}. One job instead of one per program (most of a job's time is
    starting processes and importing torch)."""
    import importlib

    results = {}
    for label, name, kwargs in plan:
        module, _, function = name.rpartition(":")
        program = getattr(importlib.import_module(module), function) if module else globals()[name]
        results[label] = program(rank, world_size, **kwargs)
        dist.barrier()
    return results


def coalesced_forms(rank: int, world_size: int) -> dict[str, Any]:
    """all_gather_coalesced ([rank][input] outputs), all_reduce_coalesced and the coalescing
    manager's fast paths (all_reduce, all_gather_into_tensor, reduce_scatter_tensor)."""
    import warnings

    warnings.simplefilter("ignore")
    inputs = [torch.full((2,), float(rank)), torch.full((3,), float(10 + rank))]
    outputs = [[torch.zeros(2), torch.zeros(3)] for _ in range(world_size)]
    dist.all_gather_coalesced(outputs, inputs)
    reduced = [torch.ones(2) * (rank + 1), torch.ones(1) * 10]
    dist.all_reduce_coalesced(reduced)
    managed = [torch.full((2,), float(rank + 1)) for _ in range(2)]
    gathered = [torch.zeros(2 * world_size) for _ in range(2)]
    with dist._coalescing_manager():
        for t in managed:
            dist.all_reduce(t)
    with dist._coalescing_manager():
        for out, t in zip(gathered, managed):
            dist.all_gather_into_tensor(out, t)
    return {"all_gather_coalesced": [[t.tolist() for t in per_rank] for per_rank in outputs],
            "all_reduce_coalesced": [t.tolist() for t in reduced],
            "managed_all_reduce": [t.tolist() for t in managed],
            "managed_all_gather": [t.tolist() for t in gathered]}


def _ddp_steps(model: nn.Module, opt: Any, x: torch.Tensor, steps: int) -> Any:
    """``steps`` DDP steps on the default group as it is now; the DDP module."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, broadcast_buffers=False)
    for _ in range(steps):
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()
    return ddp


def _same_everywhere(model: nn.Module) -> bool:
    """Whether every rank of the default group holds the same parameters."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    return all(torch.equal(everyone[0], each) for each in everyone)


def ddp_shrink(rank: int, world_size: int, victim: int, steps: int = 3) -> dict[str, Any]:
    """DDP trains; ``victim`` dies between two steps (no word to anyone); the survivors'
    next backward raises (a RuntimeError naming the lost rank, not a crash: DDP's reducer
    reads the failed bucket's Future in C++), they shrink the default group with
    accord.integrations.torch.shrink_group (torch's own cannot reach a Python backend: it
    says so), rebuild DDP on the new group and train on: the parameters stay equal."""
    import os
    import time

    import accord.integrations.torch as accord_torch

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(4, 8) + rank
    ddp = _ddp_steps(model, opt, x, steps)
    if rank == victim:
        os._exit(3)
    time.sleep(0.3)  # (the victim is gone: its socket closed)
    opt.zero_grad()
    caught = _caught(lambda: ddp(x).sum().backward())
    caught_at = time.monotonic()
    torchs_own = _caught(lambda: dist.shrink_group([victim]))
    group = accord_torch.shrink_group([victim])
    shrunk_s = time.monotonic() - caught_at
    _ddp_steps(model, opt, x, steps)  # on the new default group
    return {"caught": caught, "torchs_own": torchs_own, "shrunk_s": shrunk_s,
            "rank": dist.get_rank(), "size": dist.get_world_size(),
            "is_world": group == dist.group.WORLD, "equal": _same_everywhere(model)}


def init_when_joining(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """torch's own init_process_group in a process that is to join a running job
    (ACCORD_JOIN=1, as accordrun --replace-workers sets it): refused at once."""
    import os

    import accord.integrations.torch  # noqa: F401 — registers backend "accord"

    os.environ["ACCORD_JOIN"] = "1"
    return _caught(lambda: dist.init_process_group(backend, rank=rank, world_size=world_size))


def ddp_replace(rank: int, world_size: int, backend: str, victim: int, steps: int = 3) -> dict[str, Any]:
    """A job of ``world_size - 1`` ranks trains with DDP; ``victim`` dies; the survivors
    shrink and grow back, taking in the last rank of this run (a newcomer that calls
    accord.integrations.torch.join_process_group), broadcast the model to it, rebuild DDP
    and train on: every rank ends with the same parameters."""
    import os
    import time

    import accord.integrations.torch as accord_torch

    job = world_size - 1
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(4, 8) + rank
    start = time.monotonic()
    if rank == job:  # the newcomer: asks at once, is admitted when the survivors grow
        accord_torch.join_process_group()
        role = "newcomer"
    else:
        dist.init_process_group(backend, rank=rank, world_size=job)
        ddp = _ddp_steps(model, opt, x, steps)
        if rank == victim:
            os._exit(3)
        time.sleep(0.3)
        caught = _caught(lambda: ddp(x).sum().backward())
        assert caught["type"] == "RuntimeError", caught
        start = time.monotonic()
        assert accord_torch.lost_ranks() == [victim], accord_torch.lost_ranks()
        accord_torch.shrink_group(accord_torch.lost_ranks())
        accord_torch.grow_group(job)
        role = "survivor"
    changed_s = time.monotonic() - start
    with torch.no_grad():
        for p in model.parameters():  # the newcomer gets the survivors' model
            dist.broadcast(p, src=0)
    _ddp_steps(model, opt, x, steps)
    return {"role": role, "rank": dist.get_rank(), "size": dist.get_world_size(), "changed_s": changed_s,
            "equal": _same_everywhere(model)}


def fsdp2_shrink(rank: int, world_size: int, victim: int, steps: int = 2) -> dict[str, Any]:
    """FSDP2 trains on every rank; each keeps a full copy of the parameters after each step
    (the checkpoint a real job would load); ``victim`` dies; the survivors' next step
    raises, they shrink the default group, shard a fresh model loaded from the checkpoint
    over the survivors' mesh and train on: the full parameters agree on every survivor."""
    import os
    import time

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import accord.integrations.torch as accord_torch

    def sharded(state: dict[str, torch.Tensor] | None) -> nn.Module:
        model = _mlp()
        if state is not None:
            model.load_state_dict(state)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("shard",))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    def full(model: nn.Module) -> dict[str, torch.Tensor]:
        return {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}

    model = sharded(None)
    _train(model, rank, steps)
    checkpoint = full(model)
    if rank == victim:
        os._exit(3)
    time.sleep(0.3)
    caught = _caught(lambda: _train(model, rank, 1))
    accord_torch.shrink_group(accord_torch.lost_ranks())
    model = sharded(checkpoint)  # on the survivors' mesh
    losses = _train(model, rank, steps)
    params = torch.cat([t.reshape(-1) for t in full(model).values()])
    everyone = [torch.zeros_like(params) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, params)
    return {"caught": caught, "size": dist.get_world_size(), "losses": losses,
            "equal": all(torch.equal(everyone[0], each) for each in everyone)}
