"""The documents' multi-GPU collectives: ``broadcast_multigpu``, ``all_reduce_multigpu``,
``reduce_multigpu``, ``all_gather_multigpu``, ``reduce_scatter_multigpu``, with the documented
signatures (``src_tensor``, ``dst_tensor``) and semantics: each rank passes a list of
buffers, the same number on every rank, and each buffer takes part as a device of its own
would — a world of (group size × list length) devices, the devices of rank k numbered
k × list length + j.

Owns: the local half of each call (combining a rank's own buffers, packing them into one
scratch buffer, copying the result back into each), and handing the cross-rank half to the
functional API (``collectives``) on that scratch buffer, so it takes the one pipeline: a
list of CUDA tensors goes to the group's NCCL device group (the scratch lives on the first
tensor's device; the others are copied to it and back), a list of NumPy arrays or CPU
tensors to accord's own backend. AVG and PREMUL_SUM combine as sums and divide (by the
number of devices) or scale once at the end. An async call's copying back runs when its
cross-rank half completes (on the CUDA route, an async call is waited for before it
returns). Unlike torch's old NCCL form, tensors of one list may share a GPU (torch's NCCL
now takes one device per process; each list element still counts as a device of its own).
List lengths must be equal on every rank: a rank whose list is longer or shorter changes the
size of all_gather's and reduce_scatter's messages, which the ranks' call check refuses; for
all_reduce, broadcast and reduce, whose messages it does not change, the ranks first agree on
the length (a MAX all_reduce of two integers, one round more) and every rank raises
``ArgumentError`` naming the lengths when they differ: never a silently wrong result. Must not
know how a call runs or which device group takes it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arrays import as_buffer, is_tensor
from ..errors import ArgumentError, ArgumentTypeError
from ..group.work import Future, Work
from ..reduce_ops import RedOpType, ReduceOp, as_reduce_op, make_kernel
from . import collectives
from .common import resolve_group

_SUMMED = (RedOpType.AVG, RedOpType.PREMUL_SUM)  # combined as sums, finalised once at the end
_SUM = as_reduce_op(ReduceOp.SUM)
_TORCH_FUNCTIONS = {
    RedOpType.SUM: "add",
    RedOpType.PRODUCT: "mul",
    RedOpType.MIN: "minimum",
    RedOpType.MAX: "maximum",
    RedOpType.BAND: "bitwise_and",
    RedOpType.BOR: "bitwise_or",
    RedOpType.BXOR: "bitwise_xor",
}


def broadcast_multigpu(
    tensor_list: Sequence[Any], src: int, group: Any = None, async_op: bool = False, src_tensor: int = 0
) -> Work | None:
    """Rank ``src``'s ``tensor_list[src_tensor]`` into every buffer of every rank's list."""
    pg = resolve_group(group, "broadcast_multigpu")
    if pg is None:
        return None
    local = _local(tensor_list, "tensor_list", "broadcast_multigpu")
    if not 0 <= src_tensor < len(tensor_list):
        raise ArgumentError(
            f"broadcast_multigpu: src_tensor={src_tensor} is out of range for {len(tensor_list)}"
        )
    _same_length(pg, len(tensor_list), "broadcast_multigpu")
    carrier = local.flat(src_tensor, copy=True) if pg.global_rank == src else local.empty(1)
    work = collectives.broadcast(carrier, src, pg, async_op)
    return _after(work, "broadcast_multigpu", list(tensor_list), lambda: local.store_all(carrier))


def all_reduce_multigpu(
    tensor_list: Sequence[Any], op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """Reduce every buffer of every rank; each buffer gets the result."""
    pg = resolve_group(group, "all_reduce_multigpu")
    if pg is None:
        return None
    local, reduction = _local(tensor_list, "tensor_list", "all_reduce_multigpu"), as_reduce_op(op)
    _same_length(pg, len(tensor_list), "all_reduce_multigpu")
    acc = local.combined(reduction)
    work = collectives.all_reduce(acc, _across(reduction), pg, async_op)

    def finish() -> None:
        local.finalize(acc, reduction, pg.size() * len(tensor_list))
        local.store_all(acc)

    return _after(work, "all_reduce_multigpu", list(tensor_list), finish)


def reduce_multigpu(
    tensor_list: Sequence[Any],
    dst: int,
    op: Any = ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
    dst_tensor: int = 0,
) -> Work | None:
    """Reduce every buffer of every rank into rank ``dst``'s ``tensor_list[dst_tensor]``
    (the other buffers keep their values)."""
    pg = resolve_group(group, "reduce_multigpu")
    if pg is None:
        return None
    local, reduction = _local(tensor_list, "tensor_list", "reduce_multigpu"), as_reduce_op(op)
    if not 0 <= dst_tensor < len(tensor_list):
        raise ArgumentError(
            f"reduce_multigpu: dst_tensor={dst_tensor} is out of range for {len(tensor_list)}"
        )
    _same_length(pg, len(tensor_list), "reduce_multigpu")
    acc = local.combined(reduction)
    work = collectives.reduce(acc, dst, _across(reduction), pg, async_op)

    def finish() -> None:
        if pg.global_rank == dst:
            local.finalize(acc, reduction, pg.size() * len(tensor_list))
            local.store(dst_tensor, acc)

    return _after(work, "reduce_multigpu", list(tensor_list), finish)


def all_gather_multigpu(
    output_tensor_lists: Sequence[Sequence[Any]],
    input_tensor_list: Sequence[Any],
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """``output_tensor_lists[i][k × len(input_tensor_list) + j]`` gets rank k's
    ``input_tensor_list[j]``, for every i (one output list per input buffer)."""
    pg = resolve_group(group, "all_gather_multigpu")
    if pg is None:
        return None
    inputs = _local(input_tensor_list, "input_tensor_list", "all_gather_multigpu", writable=False)
    devices = len(input_tensor_list)
    outputs = _per_device(output_tensor_lists, "output_tensor_lists", devices, pg.size(), inputs)
    gathered = inputs.empty(pg.size() * devices)
    work = collectives.all_gather_into_tensor(gathered, inputs.packed(), pg, async_op)

    def finish() -> None:
        for out in outputs:
            out.scatter_from(gathered)

    return _after(work, "all_gather_multigpu", list(output_tensor_lists), finish)


def reduce_scatter_multigpu(
    output_tensor_list: Sequence[Any],
    input_tensor_lists: Sequence[Sequence[Any]],
    op: Any = ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """Rank k's ``output_tensor_list[j]`` gets the reduction, over every rank and every i,
    of ``input_tensor_lists[i][k × len(output_tensor_list) + j]``."""
    pg = resolve_group(group, "reduce_scatter_multigpu")
    if pg is None:
        return None
    outputs = _local(output_tensor_list, "output_tensor_list", "reduce_scatter_multigpu")
    reduction, devices = as_reduce_op(op), len(output_tensor_list)
    inputs = _per_device(input_tensor_lists, "input_tensor_lists", devices, pg.size(), outputs)
    columns = [
        _local([each.tensors[x] for each in inputs], "input_tensor_lists", "reduce_scatter_multigpu", False)
        for x in range(pg.size() * devices)
    ]
    packed = outputs.concat([column.combined(reduction) for column in columns])
    mine = outputs.empty(devices)
    work = collectives.reduce_scatter_tensor(mine, packed, _across(reduction), pg, async_op)

    def finish() -> None:
        outputs.finalize(mine, reduction, pg.size() * devices)
        outputs.scatter_from(mine)

    return _after(work, "reduce_scatter_multigpu", list(output_tensor_list), finish)


def _same_length(pg: Any, length: int, what: str) -> None:
    """Raise on every rank unless every rank of ``pg`` passed ``length`` buffers."""
    seen = np.array([length, -length], dtype=np.int64)
    collectives.all_reduce(seen, ReduceOp.MAX, pg)
    most, fewest = int(seen[0]), -int(seen[1])
    if most != fewest:
        raise ArgumentError(
            f"{what}: every rank must pass a list of the same length (one buffer per device); "
            f"this rank passed {length}, the group's lists are {fewest} to {most} long"
        )


# -- the local half ---------------------------------------------------------------------------


class _Buffers:
    """A rank's list of buffers, one per device: what both kinds do alike."""

    tensors: list[Any]
    count: int

    def store(self, i: int, flat: Any) -> None:
        raise NotImplementedError

    def store_all(self, flat: Any) -> None:
        for i in range(len(self.tensors)):
            self.store(i, flat)

    def scatter_from(self, flat: Any) -> None:
        """Buffer x gets ``flat``'s x-th piece of this list's count."""
        for x in range(len(self.tensors)):
            self.store(x, flat[x * self.count : (x + 1) * self.count])


class _NumpyBuffers(_Buffers):
    """A rank's list of NumPy arrays (or other buffers): combined with accord's kernels."""

    def __init__(self, tensors: Sequence[Any], what: str, writable: bool) -> None:
        self.tensors = list(tensors)
        self.bufs = [as_buffer(t, writable=writable, what=f"{what}[{i}]") for i, t in enumerate(tensors)]
        self.count, self.dtype_name = self.bufs[0].count, self.bufs[0].dtype_name
        self.dtype = self.bufs[0].flat.dtype

    def flat(self, i: int, copy: bool = False) -> Any:
        return self.bufs[i].flat.copy() if copy else self.bufs[i].flat

    def empty(self, n: int) -> Any:
        return np.zeros(n * self.count, dtype=self.dtype)

    def concat(self, flats: list[Any]) -> Any:
        return np.concatenate(flats)

    def packed(self) -> Any:
        return self.concat([b.flat for b in self.bufs])

    def combined(self, op: ReduceOp) -> Any:
        acc = self.bufs[0].flat.copy()
        kernel = make_kernel(_across(op), self.dtype, self.dtype_name)
        for buf in self.bufs[1:]:
            kernel.combine(acc, buf.flat)
        return acc

    def finalize(self, acc: Any, op: ReduceOp, devices: int) -> None:
        kernel = make_kernel(op, self.dtype, self.dtype_name)
        if kernel.needs_finalize:
            kernel.finalize(acc, devices)

    def store(self, i: int, flat: Any) -> None:
        self.bufs[i].flat[...] = flat
        self.bufs[i].finish()


class _TorchTensors(_Buffers):
    """A rank's list of torch tensors (CPU or a device's): combined with torch's operations
    on the first tensor's device, so that a CUDA list's cross-rank half is a CUDA tensor."""

    def __init__(self, tensors: Sequence[Any], what: str, writable: bool) -> None:
        self.torch = sys.modules["torch"]
        self.tensors = list(tensors)
        first = self.tensors[0]
        self.count, self.dtype, self.device = first.numel(), first.dtype, first.device
        for i, t in enumerate(self.tensors):
            if not is_tensor(t) or t.dtype != self.dtype:
                raise ArgumentTypeError(f"{what}[{i}]: every buffer must be a tensor of {self.dtype}")

    def flat(self, i: int, copy: bool = False) -> Any:
        flat = self.tensors[i].detach().reshape(-1).to(self.device)
        return flat.clone() if copy else flat

    def empty(self, n: int) -> Any:
        return self.torch.zeros(n * self.count, dtype=self.dtype, device=self.device)

    def concat(self, flats: list[Any]) -> Any:
        return self.torch.cat([f.to(self.device) for f in flats])

    def packed(self) -> Any:
        return self.concat([self.flat(i) for i in range(len(self.tensors))])

    def combined(self, op: ReduceOp) -> Any:
        acc = self.flat(0, copy=True)
        function = getattr(self.torch, _TORCH_FUNCTIONS[_across(op).op])
        for i in range(1, len(self.tensors)):
            function(acc, self.flat(i), out=acc)
        return acc

    def finalize(self, acc: Any, op: ReduceOp, devices: int) -> None:
        if op.op == RedOpType.AVG:
            exact = acc.is_floating_point() or acc.is_complex()
            acc.copy_(acc / devices if exact else self.torch.div(acc, devices, rounding_mode="trunc"))
        elif op.op == RedOpType.PREMUL_SUM:
            acc.mul_(op.factor)

    def store(self, i: int, flat: Any) -> None:
        target = self.tensors[i]
        target.detach().copy_(flat.reshape(target.shape))


def _local(tensors: Any, what: str, op: str, writable: bool = True) -> Any:
    """The buffers of one list, checked: not empty, one kind, the same element type and count."""
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ArgumentTypeError(f"{op}: {what} must be a non-empty list of tensors or arrays")
    kind = _TorchTensors if is_tensor(tensors[0]) else _NumpyBuffers
    local = kind(tensors, what, writable)
    for i, t in enumerate(tensors):
        count = t.numel() if is_tensor(t) else np.asarray(t).size
        if count != local.count or is_tensor(t) != (kind is _TorchTensors):
            raise ArgumentError(
                f"{op}: {what}[{i}] differs from {what}[0] (each buffer stands for a device: "
                f"the same kind and number of elements)"
            )
    if isinstance(local, _NumpyBuffers) and any(b.dtype_name != local.dtype_name for b in local.bufs):
        raise ArgumentTypeError(f"{op}: every buffer of {what} must have the same element type")
    return local


def _per_device(lists: Any, what: str, devices: int, size: int, like: Any) -> list[Any]:
    """One list per device, each of group size × devices buffers like ``like``'s."""
    if not isinstance(lists, (list, tuple)) or len(lists) != devices:
        raise ArgumentError(f"{what} must hold one list per device ({devices}), got {len(lists)}")
    checked = []
    for i, each in enumerate(lists):
        got = len(each) if isinstance(each, (list, tuple)) else type(each).__name__
        if got != size * devices:
            raise ArgumentError(
                f"{what}[{i}] must hold group size × devices = {size * devices} buffers "
                f"(one per device of the group), got {got}"
            )
        local = _local(each, f"{what}[{i}]", "multigpu")
        if local.count != like.count:
            raise ArgumentError(f"{what}[{i}]: each buffer must hold {like.count} elements, as the others")
        checked.append(local)
    return checked


def _across(op: ReduceOp) -> ReduceOp:
    """The op of the cross-rank half (and of combining): AVG and PREMUL_SUM add."""
    return _SUM if op.op in _SUMMED else op


def _after(work: Any, name: str, outputs: list[Any], finish: Callable[[], None]) -> Work | None:
    """Copy the result back once the cross-rank half is done: now (blocking), or when its
    Work completes (async; the returned Work completes after the copy)."""
    if work is None:
        finish()
        return None
    if not isinstance(work, Work):  # a device group's (torch's) Work: wait here
        work.wait()
        finish()
        return Work.completed(name, outputs)

    def copy_back(done: Future) -> list[Any]:
        done.wait()  # (raises the cross-rank half's error into the chained future)
        finish()
        return outputs

    return Work(name, outputs, work.get_future().then(copy_back))
