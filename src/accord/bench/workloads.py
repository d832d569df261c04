"""What one benchmark iteration does, for each collective, on accord or on torch (gloo/mpi).

Owns: buffer creation per implementation and size, the call itself, and the busbw factor of
each collective (nccl-tests' conventions: ``Collective.factor``). Runs inside the worker
processes. Must not know about reporting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Collective:
    name: str
    #: busbw = algbw × factor(n) (nccl-tests): all_reduce 2(n-1)/n; gathers/scatters (n-1)/n.
    factor: Callable[[int], float]
    #: whether "size" means the total over ranks (all_gather output, reduce_scatter input)
    total_size: bool = False
    sized: bool = True
    #: needs torch.distributed's API (a DDP step, torch's functional collectives): runs on
    #: gloo and torch-accord only
    torch_only: bool = False
    #: a whole training step: a tenth of the iterations
    step: bool = False
    #: not a collective but the transport's ceiling (``limits``): measured once, in accord's
    #: own run, beside the collectives it bounds
    ceiling: bool = False

    def runs_on(self, impl: str, torch_api: bool) -> bool:
        """Whether a worker of ``impl`` (with torch.distributed's API or not) runs this row."""
        if self.torch_only:
            return torch_api
        return impl == "accord" and not torch_api if self.ceiling else True


def _part(n: int) -> float:
    return (n - 1) / n


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in [
        Collective("all_reduce", lambda n: 2 * (n - 1) / n),
        Collective("broadcast", lambda n: 1.0),
        Collective("reduce", lambda n: 1.0),
        Collective("all_gather", _part, total_size=True),  # size = the whole output
        Collective("reduce_scatter", _part, total_size=True),  # size = the whole input
        Collective("all_to_all", _part, total_size=True),  # size = what one rank sends in all
        # the list forms (all_gather, reduce_scatter, all_to_all on lists of separate blocks);
        # MPI has only the contiguous calls, which its column runs for these rows too
        Collective("all_gather_list", _part, total_size=True),
        Collective("reduce_scatter_list", _part, total_size=True),
        Collective("all_to_all_list", _part, total_size=True),
        Collective("gather", _part, total_size=True),  # size = everything the root gets
        Collective("scatter", _part, total_size=True),  # size = everything the root sends
        Collective("barrier", lambda n: 0.0, sized=False),
        # the async forms, waited at once (``async_op=True`` then ``wait()``; MPI: I-call, Wait)
        Collective("all_reduce_async", lambda n: 2 * (n - 1) / n),
        Collective("broadcast_async", lambda n: 1.0),
        Collective("all_gather_async", _part, total_size=True),
        # torch's functional collectives and wait_tensor (DTensor, tensor parallelism, compile)
        Collective("all_reduce_functional", lambda n: 2 * (n - 1) / n, torch_only=True),
        Collective("all_gather_functional", _part, total_size=True, torch_only=True),
        # their floors: torch's own path (functional + wait_tensor, async + wait) on a process
        # group that does nothing, then the blocking all_reduce on the implementation: what
        # the rows above cost at best on any backend, its synchronisation included
        Collective("all_reduce_functional_floor", lambda n: 2 * (n - 1) / n, torch_only=True),
        Collective("all_reduce_async_floor", lambda n: 2 * (n - 1) / n, torch_only=True),
        # one DDP training step of a communication-bound model (≈12 M parameters, batch 2);
        # its floor: the same step with a comm hook that sends nothing; the same with a hook
        # that only synchronises (an async barrier per bucket: the ranks meet where the
        # real step's buckets meet, and no data moves); and its reduction alone: all_reduce
        # of the same gradient buckets, back to back. With one core per rank, the
        # reduction's CPU time cannot hide behind backward's: floor + reduction is the
        # step's bound, sync + reduction the same with the ranks' meeting counted
        # (docs/guides/performance.md)
        Collective("ddp_step", lambda n: 0.0, sized=False, torch_only=True, step=True),
        Collective("ddp_floor", lambda n: 0.0, sized=False, torch_only=True, step=True),
        Collective("ddp_sync", lambda n: 0.0, sized=False, torch_only=True, step=True),
        Collective("ddp_reduction", lambda n: 0.0, sized=False, torch_only=True, step=True),
        # one loopback TCP socket pair, both directions at once, and one way: what the transport
        # could move at best (busbw = bytes each way per second, comparable with world-2
        # all_reduce's and broadcast's busbw)
        Collective("tcp_limit", lambda n: 1.0, ceiling=True),
        Collective("tcp_oneway", lambda n: 1.0, ceiling=True),
    ]
}


def per_rank_count(op: str, nbytes: int, world: int, itemsize: int) -> int:
    """Elements in each rank's buffer (one rank's block, for the total-size collectives)
    for a benchmark row of ``nbytes``."""
    count = max(nbytes // itemsize, 1)
    if COLLECTIVES[op].total_size:
        count = max(count // world, 1)
    return count


def make_call(api: Any, op: str, count: int, rank: int, world: int, torch: Any = None) -> Callable[[], None]:
    """A zero-argument function doing one ``op`` with ``api`` (accord, or torch.distributed):
    the same calls on both (the tensor forms: all_gather_into_tensor, reduce_scatter_tensor,
    all_to_all_single; the ``_list`` rows: all_gather, reduce_scatter, all_to_all on lists of
    ``world`` separate blocks), ``count`` float32 elements per rank and block, root 0."""

    def zeros(n: int) -> Any:
        return torch.zeros(n, dtype=torch.float32) if torch is not None else np.zeros(n, dtype=np.float32)

    data = zeros(count)
    if op.endswith("_async"):
        big = zeros(count * world)
        return {
            "all_reduce_async": lambda: api.all_reduce(data, async_op=True).wait(),
            "broadcast_async": lambda: api.broadcast(data, src=0, async_op=True).wait(),
            "all_gather_async": lambda: api.all_gather_into_tensor(big, data, async_op=True).wait(),
        }[op]
    if op in ("all_reduce_functional_floor", "all_reduce_async_floor"):
        return _floor(api, torch, op, data)
    if op.endswith("_functional"):
        funcol, name = torch.ops._c10d_functional, api.group.WORLD.group_name
        return {
            "all_reduce_functional": lambda: funcol.wait_tensor(funcol.all_reduce(data, "sum", name)),
            "all_gather_functional": lambda: funcol.wait_tensor(
                funcol.all_gather_into_tensor(data, world, name)
            ),
        }[op]
    if op in ("all_reduce", "broadcast", "barrier", "reduce"):
        return {
            "all_reduce": lambda: api.all_reduce(data),
            "broadcast": lambda: api.broadcast(data, src=0),
            "barrier": lambda: api.barrier(),
            "reduce": lambda: api.reduce(data, dst=0),
        }[op]
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        big, other = zeros(count * world), zeros(count * world if op == "all_to_all" else 0)
        reduce_scatter = getattr(api, "reduce_scatter_single", None) or api.reduce_scatter_tensor
        return {
            "all_gather": lambda: api.all_gather_into_tensor(big, data),
            "reduce_scatter": lambda: reduce_scatter(data, big),
            "all_to_all": lambda: api.all_to_all_single(other, big),
        }[op]
    if op in ("all_gather_list", "reduce_scatter_list", "all_to_all_list"):
        blocks = [zeros(count) for _ in range(world)]
        outs = [zeros(count) for _ in range(world)] if op == "all_to_all_list" else []
        return {
            "all_gather_list": lambda: api.all_gather(blocks, data),
            "reduce_scatter_list": lambda: api.reduce_scatter(data, blocks),
            "all_to_all_list": lambda: api.all_to_all(outs, blocks),
        }[op]
    if op in ("gather", "scatter"):
        at_root = [zeros(count) for _ in range(world)] if rank == 0 else None
        if op == "gather":
            return lambda: api.gather(data, at_root, dst=0)
        return lambda: api.scatter(data, at_root, src=0)
    if op in DDP_ROWS:
        return _ddp_step(torch, op)
    if COLLECTIVES[op].ceiling:
        from . import limits

        return limits.make_call(api, op, count * 4, rank, world)
    raise ValueError(f"unknown collective {op!r}; known: {sorted(COLLECTIVES)}")


def _floor(api: Any, torch: Any, op: str, data: Any) -> Callable[[], None]:
    """The functional (or async) all_reduce's floor: torch's own path to the bench's no-op
    group, then one blocking all_reduce of ``data`` on ``api``'s default group."""
    from .noop_group import noop_group

    noop, funcol = noop_group(), torch.ops._c10d_functional
    noop_name = torch.distributed.distributed_c10d._world.pg_names[noop]  # (its group_name is unset)
    if op == "all_reduce_functional_floor":

        def functional_floor() -> None:
            funcol.wait_tensor(funcol.all_reduce(data, "sum", noop_name))
            api.all_reduce(data)

        return functional_floor

    def async_floor() -> None:
        api.all_reduce(data, group=noop, async_op=True).wait()
        api.all_reduce(data)

    return async_floor


#: The DDP rows: the step, its floors and its reduction alone (``_ddp_step``)
DDP_ROWS = ("ddp_step", "ddp_floor", "ddp_sync", "ddp_reduction")


def _ddp_step(torch: Any, op: str) -> Callable[[], None]:
    """One DDP step (forward, backward with the gradient all_reduce, SGD) of an MLP of about
    12 M parameters on a batch of 2: its time is mostly communication. ``ddp_floor``: the
    same step with a comm hook that sends nothing; ``ddp_sync``: with a hook that only
    synchronises the ranks (an async barrier per bucket, on the implementation's group);
    ``ddp_reduction``: only the all_reduce of DDP's gradient buckets (their sizes taken
    from a step's buckets), one after another."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    nn = torch.nn
    model = DistributedDataParallel(
        nn.Sequential(
            nn.Linear(1024, 4096),
            nn.ReLU(),
            nn.Linear(4096, 1024),
            nn.ReLU(),
            nn.Linear(1024, 2048),
            nn.ReLU(),
            nn.Linear(2048, 1024),
        )
    )
    buckets: list[int] = []

    # torch checks a hook's annotations against its own types (strings here): none at all
    def sends_nothing(state, bucket):  # noqa: ANN001, ANN202
        buckets.append(bucket.buffer().numel())
        done = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done

    def synchronises(state, bucket):  # noqa: ANN001, ANN202
        buffer = bucket.buffer()
        return torch.distributed.barrier(async_op=True).get_future().then(lambda _: buffer)

    if op == "ddp_sync":
        model.register_comm_hook(None, synchronises)
    elif op != "ddp_step":
        model.register_comm_hook(None, sends_nothing)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(2, 1024), torch.randn(2, 1024)

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    if op != "ddp_reduction":
        return step
    step()  # one step with the hook: the buckets' sizes, in the order DDP reduces them
    grads = [torch.ones(n) for n in buckets]
    dist = torch.distributed

    def reduction() -> None:
        for grad in grads:
            dist.all_reduce(grad)

    return reduction
