"""The collectives on a ProcessGroup: argument checks, fingerprint, algorithm choice, run.

Owns: what each collective checks before any byte moves and how it maps onto an algorithm
(``launch``: choose by size and kind, fingerprint, run on the group). Ranks given here are
group ranks. Must not know about the default world or env variables.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..arrays import Buffer, as_buffer
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


def launch(group: ProcessGroup, collective: str, nbytes: int, fp_buf: Buffer | None, args: Sequence[Any],
           outputs: Sequence[Buffer], result: list[Any], async_op: bool, root: int = -1,
           timeout: float | None = None) -> Work | None:
    """Choose the algorithm for ``nbytes`` on this group, then run ``algorithm(call, *args)``.

    ``fp_buf`` gives the dtype and count every rank must agree on; ``outputs`` are written back
    (non-contiguous views) once the call succeeded; ``result`` is what Work.result() returns.
    """
    algorithm = registry.choose(collective, nbytes, group.size(), group.tunables, group.shared)
    fp = group.fingerprint(collective, algorithm, fp_buf, root)

    def body(call: Any) -> None:
        algorithm.run(call, *args)

    return group.run_collective(collective, fp, body, outputs, result, async_op, timeout,
                                shared=algorithm.kind == registry.SHARED_MEMORY)


def all_reduce(group: ProcessGroup, tensor: Any, op: Any, async_op: bool) -> Work | None:
    reduce = as_reduce_op(op)
    buf = as_buffer(tensor, writable=True)
    kernel = make_kernel(reduce, buf.flat.dtype, buf.dtype_name)
    return launch(group, "all_reduce", buf.nbytes, buf, (buf.flat, kernel), [buf], [tensor], async_op)


def broadcast(group: ProcessGroup, tensor: Any, src: int, async_op: bool) -> Work | None:
    check_group_rank(group, src, "src")
    is_root = group.rank() == src
    buf = as_buffer(tensor, writable=not is_root)
    return launch(group, "broadcast", buf.nbytes, buf, (buf.flat, src), [] if is_root else [buf],
                  [tensor], async_op, root=src)


def barrier(group: ProcessGroup, async_op: bool, timeout: float | None = None) -> Work | None:
    return launch(group, "barrier", 0, None, (), [], [], async_op, timeout=timeout)
