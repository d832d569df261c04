"""The collectives on a ProcessGroup: their argument checks and what they hand ``launch``.

Owns: what each collective checks before any byte moves (helpers in ``arguments``) and what
it hands ``dispatch.launch``, which chooses the algorithm by size and kind, fingerprints and
runs the call on the group (split from here so each module stays under 400 lines). The size
that chooses the algorithm and the count in the fingerprint are numbers every rank agrees
on: the per-rank count where all ranks pass the same size, the total over ranks for
all_gather / reduce_scatter, 0 for an uneven all_to_all. Ranks given here are group ranks.
Must not know about the default world or env variables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays import Buffer, as_buffer
from ..reduce_ops import Kernel, as_reduce_op, make_kernel
from . import short_all_to_all, short_exchanges, short_paths
from .arguments import (
    all_gather_buffers,
    all_gather_into_tensor_buffers,
    all_to_all_buffers,
    all_to_all_single_buffers,
    equal_chunks,
    reduce_scatter_buffers,
    reduce_scatter_tensor_buffers,
    root_list,
)
from .dispatch import check_group_rank, launch
from .process_group import ProcessGroup
from .work import Work


def all_reduce(group: ProcessGroup, tensor: Any, op: Any, async_op: bool) -> Work | None:
    if not async_op:
        if short_paths.all_reduce(group, (tensor, op)):
            return None
    else:
        work: Work | None = short_paths.all_reduce_async(group, tensor, op)
        if work is not None:
            return work
    reduce = as_reduce_op(op)
    buf = as_buffer(tensor, writable=True)
    kernel = make_kernel(reduce, buf.flat.dtype, buf.dtype_name)
    return launch(
        group,
        "all_reduce",
        buf.nbytes,
        buf,
        (buf.flat, kernel),
        [buf],
        [tensor],
        async_op,
        inputs=(tensor,),
        blocking=lambda: all_reduce(group, tensor, op, False),
    )


def all_reduce_flat(group: ProcessGroup, flat: np.ndarray, op: Any) -> None:
    """A blocking all_reduce of ``flat``: a 1-D, C-contiguous, writeable NumPy array the
    caller vouches for (the torch backend's view of a plain tensor), ``op`` an accord
    ReduceOp. Skips the checks that ``all_reduce`` makes of an arbitrary argument."""
    if not short_paths.all_reduce_flat(group, flat, op):
        all_reduce(group, flat, op, False)


def broadcast_flat(group: ProcessGroup, flat: np.ndarray, src: int) -> None:
    """A blocking broadcast of ``flat`` (as ``all_reduce_flat`` takes it) from group rank
    ``src`` (an int)."""
    if not short_paths.broadcast_flat(group, flat, src):
        broadcast(group, flat, src, False)


#: ``all_reduce_queued(group, flat, op, keep, make)``: an async all_reduce of ``flat`` (as
#: ``all_reduce_flat`` takes it) queued as its short path; ``keep`` (the caller's tensors)
#: stays referenced until the call ran; the Work is a ``make`` (a Work that is its own queue
#: item: ``Planner.defer``). None: not possible (take the general path). (The short path's
#: own function: one frame less on every async call.)
all_reduce_queued = short_paths.all_reduce_flat_async


#: ``all_gather_into_tensor_short(group, (output, input))``: the blocking call's short path
#: alone (False: take the general path), for arrays the caller vouches for (the torch
#: backend's views of plain tensors); ``..._queued(group, output, input, make, tensors)``:
#: the async call queued as its short path, its Work a ``make``, holding ``tensors`` (None:
#: take the general path). The same for reduce_scatter_tensor (``(output, input, op)``).
all_gather_into_tensor_short = short_exchanges.all_gather_into_tensor
all_gather_into_tensor_queued = short_exchanges.all_gather_into_tensor_async
reduce_scatter_tensor_short = short_exchanges.reduce_scatter_tensor
reduce_scatter_tensor_queued = short_exchanges.reduce_scatter_tensor_async


#: The same for the rest — ``*_short(group, args)``, ``*_queued(group, *args, make, tensors)``:
#: scatter ``(out, ins, src)``, gather ``(inp, outs, dst)`` (the list on the root, else None),
#: reduce ``(tensor, dst, op)``, the list forms all_gather ``(outs, inp)``, reduce_scatter
#: ``(out, ins, op)``, all_to_all ``(outs, ins)``, and all_to_all_single ``(out, inp,
#: output_split_sizes, input_split_sizes)``.
scatter_short, gather_short, reduce_short = short_paths.scatter, short_paths.gather, short_paths.reduce
all_gather_short, all_gather_queued = short_exchanges.all_gather, short_exchanges.all_gather_async
reduce_scatter_short, reduce_scatter_queued = (
    short_exchanges.reduce_scatter,
    short_exchanges.reduce_scatter_async,
)
all_to_all_short, all_to_all_queued = short_all_to_all.all_to_all, short_all_to_all.all_to_all_async
all_to_all_single_short = short_all_to_all.all_to_all_single
all_to_all_single_queued = short_all_to_all.all_to_all_single_async


def broadcast_queued(
    group: ProcessGroup, flat: np.ndarray, src: Any, keep: Any, make: Callable[..., Any]
) -> Any:
    """An async broadcast, as ``all_reduce_queued``; None also for a bad ``src`` (the general
    path explains it)."""
    if type(src) is not int or not 0 <= src < group.size():
        return None
    return short_paths.broadcast_async(group, flat, src, keep, make)


def broadcast(group: ProcessGroup, tensor: Any, src: int, async_op: bool) -> Work | None:
    check_group_rank(group, src, "src")
    if not async_op:
        if short_paths.broadcast(group, (tensor, src)):
            return None
    else:
        work: Work | None = short_paths.broadcast_async(group, tensor, src)
        if work is not None:
            return work
    is_root = group.rank() == src
    buf = as_buffer(tensor, writable=not is_root)
    return launch(
        group,
        "broadcast",
        buf.nbytes,
        buf,
        (buf.flat, src),
        [] if is_root else [buf],
        [tensor],
        async_op,
        root=src,
        inputs=(tensor,),
        blocking=lambda: broadcast(group, tensor, src, False),
    )


def barrier(group: ProcessGroup, async_op: bool, timeout: float | None = None) -> Work | None:
    if not async_op and timeout is None and short_paths.barrier(group, ()):
        return None
    return launch(
        group,
        "barrier",
        0,
        None,
        (),
        [],
        [],
        async_op,
        timeout=timeout,
        blocking=lambda: barrier(group, False, timeout),
    )


def _kernel(op: Any, buf: Buffer) -> Kernel:
    return make_kernel(as_reduce_op(op), buf.flat.dtype, buf.dtype_name)


def reduce(group: ProcessGroup, tensor: Any, dst: int, op: Any, async_op: bool) -> Work | None:
    """Reduce into ``tensor`` on ``dst``; the other ranks' tensors are left unchanged."""
    if not async_op and short_paths.reduce(group, (tensor, dst, op)):
        return None
    check_group_rank(group, dst, "dst")
    is_root = group.rank() == dst
    buf = as_buffer(tensor, writable=is_root)
    kernel = _kernel(op, buf)
    return launch(
        group,
        "reduce",
        buf.nbytes,
        buf,
        (buf.flat, kernel, dst),
        [buf] if is_root else [],
        [tensor],
        async_op,
        root=dst,
        inputs=(tensor,),
        blocking=lambda: reduce(group, tensor, dst, op, False),
    )


def all_gather(group: ProcessGroup, tensor_list: Any, tensor: Any, async_op: bool) -> Work | None:
    """tensor_list[i] gets rank i's ``tensor``; sizes may differ from rank to rank."""
    if not async_op and short_exchanges.all_gather(group, (tensor_list, tensor)):
        return None
    inp, outs = all_gather_buffers(group.rank(), group.size(), tensor_list, tensor)
    total = sum(o.count for o in outs)
    return launch(
        group,
        "all_gather",
        total * inp.itemsize,
        inp,
        (inp.flat, [o.flat for o in outs]),
        outs,
        [list(tensor_list)],
        async_op,
        count=total,
        inputs=(tensor,),
        blocking=lambda: all_gather(group, tensor_list, tensor, False),
    )


def all_gather_into_tensor(
    group: ProcessGroup, output_tensor: Any, input_tensor: Any, async_op: bool
) -> Work | None:
    """``output_tensor`` (size × input elements, flat or stacked) gets every rank's input in
    rank order."""
    if not async_op:
        if short_exchanges.all_gather_into_tensor(group, (output_tensor, input_tensor)):
            return None
    else:
        work: Work | None = short_exchanges.all_gather_into_tensor_async(group, output_tensor, input_tensor)
        if work is not None:
            return work
    inp, out = all_gather_into_tensor_buffers(group.size(), output_tensor, input_tensor)
    outs = equal_chunks(out.flat, group.size())
    return launch(
        group,
        "all_gather",
        out.nbytes,
        inp,
        (inp.flat, outs),
        [out],
        [output_tensor],
        async_op,
        count=out.count,
        inputs=(input_tensor,),
        blocking=lambda: all_gather_into_tensor(group, output_tensor, input_tensor, False),
    )


def gather(group: ProcessGroup, tensor: Any, gather_list: Any, dst: int, async_op: bool) -> Work | None:
    """``gather_list`` on ``dst`` gets every rank's ``tensor`` (all of the same size)."""
    if not async_op and short_paths.gather(group, (tensor, gather_list, dst)):
        return None
    check_group_rank(group, dst, "dst")
    inp = as_buffer(tensor, writable=False)
    outs = root_list(group.rank(), group.size(), gather_list, dst, "gather_list", "dst", inp, writable=True)
    flats = None if outs is None else [o.flat for o in outs]
    return launch(
        group,
        "gather",
        inp.nbytes,
        inp,
        (inp.flat, flats, dst),
        outs or [],
        [gather_list] if outs is not None else [],
        async_op,
        root=dst,
        inputs=(tensor,),
        blocking=lambda: gather(group, tensor, gather_list, dst, False),
    )


def scatter(group: ProcessGroup, tensor: Any, scatter_list: Any, src: int, async_op: bool) -> Work | None:
    """``tensor`` on rank i gets ``scatter_list[i]`` of ``src`` (all of the same size)."""
    if not async_op and short_paths.scatter(group, (tensor, scatter_list, src)):
        return None
    check_group_rank(group, src, "src")
    out = as_buffer(tensor, writable=True)
    ins = root_list(group.rank(), group.size(), scatter_list, src, "scatter_list", "src", out, writable=False)
    flats = None if ins is None else [b.flat for b in ins]
    return launch(
        group,
        "scatter",
        out.nbytes,
        out,
        (out.flat, flats, src),
        [out],
        [tensor],
        async_op,
        root=src,
        inputs=(scatter_list,) if ins is not None else (),
        blocking=lambda: scatter(group, tensor, scatter_list, src, False),
    )


def reduce_scatter(group: ProcessGroup, output: Any, input_list: Any, op: Any, async_op: bool) -> Work | None:
    """``output`` on rank j gets the reduction over ranks of their ``input_list[j]``."""
    if not async_op and short_exchanges.reduce_scatter(group, (output, input_list, op)):
        return None
    out, ins = reduce_scatter_buffers(group.rank(), group.size(), output, input_list)
    total = sum(b.count for b in ins)
    return launch(
        group,
        "reduce_scatter",
        total * out.itemsize,
        out,
        (out.flat, [b.flat for b in ins], _kernel(op, out)),
        [out],
        [output],
        async_op,
        count=total,
        inputs=(input_list,),
        blocking=lambda: reduce_scatter(group, output, input_list, op, False),
    )


def reduce_scatter_tensor(
    group: ProcessGroup,
    output: Any,
    input: Any,  # noqa: A002
    op: Any,
    async_op: bool,
) -> Work | None:
    """``input`` (size × output elements, flat or stacked) is reduced; rank j gets chunk j."""
    if not async_op:
        if short_exchanges.reduce_scatter_tensor(group, (output, input, op)):
            return None
    else:
        work: Work | None = short_exchanges.reduce_scatter_tensor_async(group, output, input, op)
        if work is not None:
            return work
    out, inp = reduce_scatter_tensor_buffers(group.size(), output, input)
    n = group.size()
    return launch(
        group,
        "reduce_scatter",
        inp.nbytes,
        out,
        (out.flat, equal_chunks(inp.flat, n), _kernel(op, out)),
        [out],
        [output],
        async_op,
        count=inp.count,
        inputs=(input,),
        blocking=lambda: reduce_scatter_tensor(group, output, input, op, False),
    )


def all_to_all(
    group: ProcessGroup, output_tensor_list: Any, input_tensor_list: Any, async_op: bool
) -> Work | None:
    """``output_tensor_list[j]`` gets rank j's ``input_tensor_list[me]``; sizes may differ."""
    if not async_op and short_all_to_all.all_to_all(group, (output_tensor_list, input_tensor_list)):
        return None
    outs, ins = all_to_all_buffers(group.rank(), group.size(), output_tensor_list, input_tensor_list)
    return launch(
        group,
        "all_to_all",
        0,
        ins[0],
        ([o.flat for o in outs], [b.flat for b in ins]),
        outs,
        [list(output_tensor_list)],
        async_op,
        count=0,
        inputs=(input_tensor_list,),
        blocking=lambda: all_to_all(group, output_tensor_list, input_tensor_list, False),
    )


def all_to_all_single(
    group: ProcessGroup,
    output: Any,
    input: Any,  # noqa: A002
    output_split_sizes: Any,
    input_split_sizes: Any,
    async_op: bool,
) -> Work | None:
    """``input`` cut along dim 0 (evenly, or by ``input_split_sizes``) goes piece j to rank j;
    ``output`` is filled the same way from every rank."""
    if not async_op and short_all_to_all.all_to_all_single(
        group, (output, input, output_split_sizes, input_split_sizes)
    ):
        return None
    out, inp, outs, ins, even = all_to_all_single_buffers(
        group.rank(), group.size(), output, input, output_split_sizes, input_split_sizes
    )
    return launch(
        group,
        "all_to_all",
        inp.nbytes if even else 0,
        inp,
        (outs, ins),
        [out],
        [output],
        async_op,
        count=inp.count if even else 0,
        inputs=(input,),
        blocking=lambda: all_to_all_single(
            group, output, input, output_split_sizes, input_split_sizes, False
        ),
    )
