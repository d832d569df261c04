"""The torch-compatible collective functions (module level): thin wrappers over ``group``.

Owns: torch's signatures, defaults and return conventions (None when blocking, a Work when
``async_op=True``, None on non-member ranks). Ranks in signatures are global, as torch's.
A call this rank leaves by an exception is counted on its group (``calls_raised``; the
``try`` costs nothing when nothing is raised), here and in ``objects`` and ``p2p``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..diagnostics import debug, detail
from ..group import collective_ops, short_paths
from ..group import monitored_barrier as monitored
from ..group.work import Work
from ..reduce_ops import ReduceOp
from ..timeouts import to_seconds
from .common import device_group, group_rank, resolve_group


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across the group in place; every rank gets the result."""
    pg = resolve_group(group, "all_reduce")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.all_reduce(tensor, op, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "all_reduce", lambda: collective_ops.all_reduce(pg, tensor, op, async_op),
                              tensor=tensor, op=op)
        if not async_op and short_paths.all_reduce(pg, tensor, op):  # the commonest call: no hop
            return None
        return collective_ops.all_reduce(pg, tensor, op, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def broadcast(tensor: Any, src: int | None = None, group: Any = None, async_op: bool = False,
              group_src: int | None = None) -> Work | None:
    """Copy ``tensor`` from rank ``src`` (global) or ``group_src`` into every rank's tensor."""
    pg = resolve_group(group, "broadcast")
    if pg is None:
        return None
    try:
        root = group_rank(pg, src, group_src, "src")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.broadcast(tensor, root, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "broadcast", lambda: collective_ops.broadcast(pg, tensor, root, async_op),
                              root, tensor=tensor)
        if not async_op and short_paths.broadcast(pg, tensor, root):  # (group_rank checked root)
            return None
        return collective_ops.broadcast(pg, tensor, root, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None,
            timeout: timedelta | None = None) -> Work | None:
    """Block until every rank of the group has called barrier (``timeout`` for this call)."""
    pg = resolve_group(group, "barrier")
    if pg is None:
        return None
    try:
        seconds = None if timeout is None else to_seconds(timeout)
        if debug.DETAIL_ON:
            return detail.run(pg, "barrier", lambda: collective_ops.barrier(pg, async_op, seconds))
        return collective_ops.barrier(pg, async_op, seconds)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def reduce(tensor: Any, dst: int | None = None, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False, group_dst: int | None = None) -> Work | None:
    """Reduce ``tensor`` of every rank into ``tensor`` on ``dst`` (global) or ``group_dst``.

    The other ranks' tensors are left unchanged (gloo may scribble on them; accord does not).
    """
    pg = resolve_group(group, "reduce")
    if pg is None:
        return None
    try:
        root = group_rank(pg, dst, group_dst, "dst")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.reduce(tensor, root, op, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "reduce", lambda: collective_ops.reduce(pg, tensor, root, op, async_op),
                              root, tensor=tensor, op=op)
        if not async_op and short_paths.reduce(pg, tensor, root, op):  # (group_rank checked root)
            return None
        return collective_ops.reduce(pg, tensor, root, op, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def all_gather(tensor_list: Any, tensor: Any, group: Any = None, async_op: bool = False) -> Work | None:
    """``tensor_list[i]`` gets rank i's ``tensor``. Sizes may differ from rank to rank (gloo
    requires equal sizes): every rank passes the same list of sizes."""
    pg = resolve_group(group, "all_gather")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.all_gather(tensor_list, tensor, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "all_gather",
                              lambda: collective_ops.all_gather(pg, tensor_list, tensor, async_op),
                              tensor_list=tensor_list, tensor=tensor)
        return collective_ops.all_gather(pg, tensor_list, tensor, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: Any = None,
                           async_op: bool = False) -> Work | None:
    """Gather every rank's ``input_tensor`` into ``output_tensor``, in rank order: its size is
    group size × the input's (flat, or stacked along a new or the first dimension)."""
    pg = resolve_group(group, "all_gather_into_tensor")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, input_tensor)) is not None:
            return dg.all_gather_into_tensor(output_tensor, input_tensor, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "all_gather_into_tensor",
                              lambda: collective_ops.all_gather_into_tensor(pg, output_tensor, input_tensor,
                                                                            async_op),
                              output_tensor=output_tensor, input_tensor=input_tensor)
        return collective_ops.all_gather_into_tensor(pg, output_tensor, input_tensor, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


all_gather_single = all_gather_into_tensor  # torch 2.13's newer name of the same function


def gather(tensor: Any, gather_list: Any = None, dst: int | None = None, group: Any = None,
           async_op: bool = False, group_dst: int | None = None) -> Work | None:
    """On ``dst`` (default: global rank 0), ``gather_list[i]`` gets rank i's ``tensor``; every
    rank's tensor has the same size. ``gather_list`` only on ``dst`` (ValueError elsewhere)."""
    pg = resolve_group(group, "gather")
    if pg is None:
        return None
    try:
        root = group_rank(pg, 0 if dst is None and group_dst is None else dst, group_dst, "dst")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.gather(tensor, gather_list or [], root, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "gather",
                              lambda: collective_ops.gather(pg, tensor, gather_list, root, async_op),
                              root, tensor=tensor)
        if not async_op and short_paths.gather(pg, tensor, gather_list, root):  # (group_rank checked root)
            return None
        return collective_ops.gather(pg, tensor, gather_list, root, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def scatter(tensor: Any, scatter_list: Any = None, src: int | None = None, group: Any = None,
            async_op: bool = False, group_src: int | None = None) -> Work | None:
    """Rank i's ``tensor`` gets ``scatter_list[i]`` from ``src`` (default: global rank 0);
    ``scatter_list`` only on ``src`` (ValueError elsewhere)."""
    pg = resolve_group(group, "scatter")
    if pg is None:
        return None
    try:
        root = group_rank(pg, 0 if src is None and group_src is None else src, group_src, "src")
        if pg.device_groups and (dg := device_group(pg, tensor)) is not None:
            return dg.scatter(tensor, scatter_list or [], root, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "scatter",
                              lambda: collective_ops.scatter(pg, tensor, scatter_list, root, async_op),
                              root, tensor=tensor)
        if not async_op and short_paths.scatter(pg, tensor, scatter_list, root):  # (group_rank checked root)
            return None
        return collective_ops.scatter(pg, tensor, scatter_list, root, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def reduce_scatter(output: Any, input_list: Any, op: Any = ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> Work | None:
    """``output`` on rank j gets the reduction of every rank's ``input_list[j]`` (never
    computed as a full all_reduce)."""
    pg = resolve_group(group, "reduce_scatter")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, output)) is not None:
            return dg.reduce_scatter(output, input_list, op, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "reduce_scatter",
                              lambda: collective_ops.reduce_scatter(pg, output, input_list, op, async_op),
                              output=output, input_list=input_list, op=op)
        return collective_ops.reduce_scatter(pg, output, input_list, op, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def reduce_scatter_tensor(output: Any, input: Any, op: Any = ReduceOp.SUM, group: Any = None,  # noqa: A002
                          async_op: bool = False) -> Work | None:
    """``input`` holds group size × output's elements; rank j's ``output`` gets the reduction
    of every rank's chunk j."""
    pg = resolve_group(group, "reduce_scatter_tensor")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, output)) is not None:
            return dg.reduce_scatter_tensor(output, input, op, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "reduce_scatter_tensor",
                              lambda: collective_ops.reduce_scatter_tensor(pg, output, input, op, async_op),
                              output=output, input=input, op=op)
        return collective_ops.reduce_scatter_tensor(pg, output, input, op, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


reduce_scatter_single = reduce_scatter_tensor  # torch 2.13's newer name of the same function


def all_to_all(output_tensor_list: Any, input_tensor_list: Any, group: Any = None,
               async_op: bool = False) -> Work | None:
    """``input_tensor_list[j]`` goes to rank j; ``output_tensor_list[j]`` comes from rank j.
    Sizes may differ for every pair (gloo rejects uneven lists)."""
    pg = resolve_group(group, "all_to_all")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, input_tensor_list)) is not None:
            return dg.all_to_all(output_tensor_list, input_tensor_list, async_op)  # type: ignore[no-any-return]
        if debug.DETAIL_ON:
            return detail.run(pg, "all_to_all",
                              lambda: collective_ops.all_to_all(pg, output_tensor_list, input_tensor_list,
                                                                async_op),
                              output_tensor_list=output_tensor_list, input_tensor_list=input_tensor_list)
        return collective_ops.all_to_all(pg, output_tensor_list, input_tensor_list, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def all_to_all_single(output: Any, input: Any, output_split_sizes: Any = None,  # noqa: A002
                      input_split_sizes: Any = None, group: Any = None,
                      async_op: bool = False) -> Work | None:
    """Split ``input`` along dim 0 (evenly, or by ``input_split_sizes`` rows) and send piece j
    to rank j; ``output`` is filled along dim 0 from every rank (by ``output_split_sizes``)."""
    pg = resolve_group(group, "all_to_all_single")
    if pg is None:
        return None
    try:
        if pg.device_groups and (dg := device_group(pg, input)) is not None:
            return dg.all_to_all_single(  # type: ignore[no-any-return]
                output, input, output_split_sizes, input_split_sizes, async_op)
        if debug.DETAIL_ON:
            return detail.run(pg, "all_to_all_single",
                              lambda: collective_ops.all_to_all_single(pg, output, input, output_split_sizes,
                                                                       input_split_sizes, async_op),
                              output=output, input=input, output_split_sizes=_splits(output_split_sizes),
                              input_split_sizes=_splits(input_split_sizes))
        return collective_ops.all_to_all_single(pg, output, input, output_split_sizes,
                                                input_split_sizes, async_op)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def monitored_barrier(group: Any = None, timeout: timedelta | float | None = None,
                      wait_all_ranks: bool = False) -> None:
    """A barrier whose rank 0 reports who did not arrive within ``timeout`` (default: the
    group's timeout): DistTimeoutError naming the first missing rank, or all of them with
    ``wait_all_ranks=True``; the other ranks then fail at once too."""
    pg = resolve_group(group, "monitored_barrier")
    if pg is None:
        return None
    try:
        seconds = None if timeout is None else to_seconds(timeout)
        monitored.monitored_barrier(pg, seconds, wait_all_ranks)
        return None
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def _splits(sizes: Any) -> Any:
    """Split sizes as a list of ints for the DETAIL check (a tensor of sizes too)."""
    if sizes is None:
        return None
    try:
        return [int(v) for v in sizes]
    except (TypeError, ValueError):
        return sizes
