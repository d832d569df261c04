"""The torch-compatible collective functions (module level), and their rows of the pipeline.

Owns: torch's signatures, defaults, docstrings and return conventions (None when blocking, a
Work when ``async_op=True``, None on non-member ranks), and each collective's ``Call`` row:
its general path (``group.collective_ops``), its short path (``group.short_paths`` /
``group.short_exchanges``), its device group's method, and the names the DETAIL check gives
its arguments. Ranks in signatures are global, as torch's. Every function is one call of
``pipeline.run``, which takes every step in order; must not know how a step works.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..group import collective_ops, short_all_to_all, short_exchanges, short_paths
from ..group import monitored_barrier as monitored
from ..group.process_group import ProcessGroup
from ..group.work import Work
from ..reduce_ops import ReduceOp
from ..timeouts import to_seconds
from .pipeline import ROOT, Call, Rank, on_device, run


def _barrier(pg: ProcessGroup, timeout: timedelta | float | None, async_op: bool) -> Work | None:
    return collective_ops.barrier(pg, async_op, None if timeout is None else to_seconds(timeout))


def _short_barrier(pg: ProcessGroup, args: tuple[timedelta | float | None]) -> bool:
    return args[0] is None and short_paths.barrier(pg, ())  # (a timeout of its own: the general path)


def _monitored_barrier(pg: ProcessGroup, timeout: timedelta | float | None, wait_all_ranks: bool) -> None:
    monitored.monitored_barrier(pg, None if timeout is None else to_seconds(timeout), wait_all_ranks)


# The rows: arguments as the group functions take them, after the group (torch's rank pair in
# the ranks' place until ``run`` translates it).
ALL_REDUCE = Call(
    "all_reduce",
    collective_ops.all_reduce,
    short=short_paths.all_reduce,
    device=on_device("all_reduce"),
    detail=("tensor", "op"),
)
BROADCAST = Call(
    "broadcast",
    collective_ops.broadcast,
    short=short_paths.broadcast,
    device=on_device("broadcast"),
    detail=("tensor", ROOT),
    rank=Rank(1, "src"),
)
BARRIER = Call("barrier", _barrier, short=_short_barrier, detail=())
REDUCE = Call(
    "reduce",
    collective_ops.reduce,
    short=short_paths.reduce,
    device=on_device("reduce"),
    detail=("tensor", ROOT, "op"),
    rank=Rank(1, "dst"),
)
ALL_GATHER = Call(
    "all_gather",
    collective_ops.all_gather,
    short=short_exchanges.all_gather,
    device=on_device("all_gather"),
    carrier=1,
    detail=("tensor_list", "tensor"),
)
ALL_GATHER_INTO_TENSOR = Call(
    "all_gather_into_tensor",
    collective_ops.all_gather_into_tensor,
    short=short_exchanges.all_gather_into_tensor,
    device=on_device("all_gather_into_tensor"),
    carrier=1,
    detail=("output_tensor", "input_tensor"),
)
GATHER = Call(
    "gather",
    collective_ops.gather,
    short=short_paths.gather,
    device=on_device("gather"),
    detail=("tensor", None, ROOT),
    rank=Rank(2, "dst", default=0),
)
SCATTER = Call(
    "scatter",
    collective_ops.scatter,
    short=short_paths.scatter,
    device=on_device("scatter"),
    detail=("tensor", None, ROOT),
    rank=Rank(2, "src", default=0),
)
REDUCE_SCATTER = Call(
    "reduce_scatter",
    collective_ops.reduce_scatter,
    short=short_exchanges.reduce_scatter,
    device=on_device("reduce_scatter"),
    detail=("output", "input_list", "op"),
)
REDUCE_SCATTER_TENSOR = Call(
    "reduce_scatter_tensor",
    collective_ops.reduce_scatter_tensor,
    short=short_exchanges.reduce_scatter_tensor,
    device=on_device("reduce_scatter_tensor"),
    detail=("output", "input", "op"),
)
ALL_TO_ALL = Call(
    "all_to_all",
    collective_ops.all_to_all,
    short=short_all_to_all.all_to_all,
    device=on_device("all_to_all"),
    carrier=1,
    detail=("output_tensor_list", "input_tensor_list"),
)
ALL_TO_ALL_SINGLE = Call(
    "all_to_all_single",
    collective_ops.all_to_all_single,
    short=short_all_to_all.all_to_all_single,
    device=on_device("all_to_all_single"),
    carrier=1,
    detail=("output", "input", "output_split_sizes", "input_split_sizes"),
)
MONITORED_BARRIER = Call("monitored_barrier", _monitored_barrier, takes_async_op=False)


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across the group in place; every rank gets the result."""
    return run(ALL_REDUCE, group, async_op, tensor, op)


def broadcast(
    tensor: Any,
    src: int | None = None,
    group: Any = None,
    async_op: bool = False,
    group_src: int | None = None,
) -> Work | None:
    """Copy ``tensor`` from rank ``src`` (global) or ``group_src`` into every rank's tensor."""
    return run(BROADCAST, group, async_op, tensor, src, group_src)


def barrier(
    group: Any = None, async_op: bool = False, device_ids: Any = None, timeout: timedelta | None = None
) -> Work | None:
    """Block until every rank of the group has called barrier (``timeout`` for this call)."""
    return run(BARRIER, group, async_op, timeout)


def reduce(
    tensor: Any,
    dst: int | None = None,
    op: Any = ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
    group_dst: int | None = None,
) -> Work | None:
    """Reduce ``tensor`` of every rank into ``tensor`` on ``dst`` (global) or ``group_dst``.

    The other ranks' tensors are left unchanged (gloo may scribble on them; accord does not).
    """
    return run(REDUCE, group, async_op, tensor, dst, group_dst, op)


def all_gather(tensor_list: Any, tensor: Any, group: Any = None, async_op: bool = False) -> Work | None:
    """``tensor_list[i]`` gets rank i's ``tensor``. Sizes may differ from rank to rank (gloo
    requires equal sizes): every rank passes the same list of sizes."""
    return run(ALL_GATHER, group, async_op, tensor_list, tensor)


def all_gather_into_tensor(
    output_tensor: Any, input_tensor: Any, group: Any = None, async_op: bool = False
) -> Work | None:
    """Gather every rank's ``input_tensor`` into ``output_tensor``, in rank order: its size is
    group size × the input's (flat, or stacked along a new or the first dimension)."""
    return run(ALL_GATHER_INTO_TENSOR, group, async_op, output_tensor, input_tensor)


all_gather_single = all_gather_into_tensor  # torch 2.13's newer name of the same function
all_gather_base = all_gather_into_tensor  # torch's private _all_gather_base, which libraries call


def gather(
    tensor: Any,
    gather_list: Any = None,
    dst: int | None = None,
    group: Any = None,
    async_op: bool = False,
    group_dst: int | None = None,
) -> Work | None:
    """On ``dst`` (default: global rank 0), ``gather_list[i]`` gets rank i's ``tensor``; every
    rank's tensor has the same size. ``gather_list`` only on ``dst`` (ValueError elsewhere)."""
    return run(GATHER, group, async_op, tensor, gather_list, dst, group_dst)


def scatter(
    tensor: Any,
    scatter_list: Any = None,
    src: int | None = None,
    group: Any = None,
    async_op: bool = False,
    group_src: int | None = None,
) -> Work | None:
    """Rank i's ``tensor`` gets ``scatter_list[i]`` from ``src`` (default: global rank 0);
    ``scatter_list`` only on ``src`` (ValueError elsewhere)."""
    return run(SCATTER, group, async_op, tensor, scatter_list, src, group_src)


def reduce_scatter(
    output: Any, input_list: Any, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """``output`` on rank j gets the reduction of every rank's ``input_list[j]`` (never
    computed as a full all_reduce)."""
    return run(REDUCE_SCATTER, group, async_op, output, input_list, op)


def reduce_scatter_tensor(
    output: Any,
    input: Any,  # noqa: A002
    op: Any = ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """``input`` holds group size × output's elements; rank j's ``output`` gets the reduction
    of every rank's chunk j."""
    return run(REDUCE_SCATTER_TENSOR, group, async_op, output, input, op)


reduce_scatter_single = reduce_scatter_tensor  # torch 2.13's newer name of the same function
reduce_scatter_base = reduce_scatter_tensor  # torch's private _reduce_scatter_base, which libraries call


def all_to_all(
    output_tensor_list: Any, input_tensor_list: Any, group: Any = None, async_op: bool = False
) -> Work | None:
    """``input_tensor_list[j]`` goes to rank j; ``output_tensor_list[j]`` comes from rank j.
    Sizes may differ for every pair (gloo rejects uneven lists)."""
    return run(ALL_TO_ALL, group, async_op, output_tensor_list, input_tensor_list)


def all_to_all_single(
    output: Any,
    input: Any,  # noqa: A002
    output_split_sizes: Any = None,
    input_split_sizes: Any = None,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """Split ``input`` along dim 0 (evenly, or by ``input_split_sizes`` rows) and send piece j
    to rank j; ``output`` is filled along dim 0 from every rank (by ``output_split_sizes``)."""
    return run(ALL_TO_ALL_SINGLE, group, async_op, output, input, output_split_sizes, input_split_sizes)


def monitored_barrier(
    group: Any = None, timeout: timedelta | float | None = None, wait_all_ranks: bool = False
) -> None:
    """A barrier whose rank 0 reports who did not arrive within ``timeout`` (default: the
    group's timeout): DistTimeoutError naming the first missing rank, or all of them with
    ``wait_all_ranks=True``; the other ranks then fail at once too."""
    run(MONITORED_BARRIER, group, False, timeout, wait_all_ranks)
