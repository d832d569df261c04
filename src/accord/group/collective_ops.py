"""The collectives on a ProcessGroup: argument checks, fingerprint, algorithm choice, run.

Owns: what each collective checks before any byte moves and how it maps onto an algorithm.
Ranks given here are group ranks. Must not know about the default world or env variables.
"""

from __future__ import annotations

from typing import Any

from ..arrays import as_buffer
from ..collectives import registry
from ..reduce_ops import as_reduce_op, make_kernel
from .process_group import ProcessGroup
from .work import Work


def check_group_rank(group: ProcessGroup, rank: int, what: str) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"{what} must be an int rank, got {type(rank).__name__}")
    if not 0 <= rank < group.size():
        raise ValueError(f"{what}={rank} is out of range for a group of size {group.size()}")
    return rank


def all_reduce(group: ProcessGroup, tensor: Any, op: Any, async_op: bool) -> Work | None:
    reduce = as_reduce_op(op)
    buf = as_buffer(tensor, writable=True)
    kernel = make_kernel(reduce, buf.flat.dtype, buf.dtype_name)
    algorithm = registry.choose("all_reduce", buf.nbytes, group.size(), group.tunables, group.shared)
    fp = group.fingerprint("all_reduce", algorithm, buf)

    def body(call: Any) -> None:
        algorithm.run(call, buf.flat, kernel)

    return group.run_collective("all_reduce", fp, body, [buf], [tensor], async_op,
                                shared=algorithm.kind == registry.SHARED_MEMORY)


def broadcast(group: ProcessGroup, tensor: Any, src: int, async_op: bool) -> Work | None:
    check_group_rank(group, src, "src")
    buf = as_buffer(tensor, writable=group.rank() != src)
    algorithm = registry.choose("broadcast", buf.nbytes, group.size(), group.tunables, group.shared)
    fp = group.fingerprint("broadcast", algorithm, buf, root=src)

    def body(call: Any) -> None:
        algorithm.run(call, buf.flat, src)

    outputs = [buf] if group.rank() != src else []
    return group.run_collective("broadcast", fp, body, outputs, [tensor], async_op,
                                shared=algorithm.kind == registry.SHARED_MEMORY)


def barrier(group: ProcessGroup, async_op: bool, timeout: float | None = None) -> Work | None:
    algorithm = registry.choose("barrier", 0, group.size(), group.tunables, group.shared)
    fp = group.fingerprint("barrier", algorithm, None)
    return group.run_collective("barrier", fp, algorithm.run, [], [], async_op, timeout,
                                shared=algorithm.kind == registry.SHARED_MEMORY)
