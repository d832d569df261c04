"""What the collectives check before any byte moves: tensor lists, dtypes, sizes, splits.

Owns: turning what a caller passed (a list of tensors, a flat or stacked output, split
sizes along dim 0) into Buffers and flat views, with errors that say what to fix
(TypeError for the wrong kind of argument, ValueError for a wrong length, size or dtype).
Must not know about algorithms, transports or the default world.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays import Buffer, as_buffer
from ..errors import ArgumentError, ArgumentTypeError


def buffer_list(tensors: Any, size: int, what: str, writable: bool) -> list[Buffer]:
    """One Buffer per rank from a list (or tuple) of ``size`` tensors."""
    if not isinstance(tensors, (list, tuple)):
        raise ArgumentTypeError(
            f"{what} must be a list of tensors (one per rank), got {type(tensors).__name__}"
        )
    if len(tensors) != size:
        raise ArgumentError(
            f"{what} has {len(tensors)} tensors, but the group has {size} ranks: pass exactly one per rank"
        )
    return [as_buffer(t, writable=writable, what=f"{what}[{i}]") for i, t in enumerate(tensors)]


def root_list(
    rank: int, size: int, tensors: Any, root: int, what: str, role: str, mine: Buffer, writable: bool
) -> list[Buffer] | None:
    """The root's list (one tensor per rank, each like ``mine``); None elsewhere, where only
    None or an empty list is allowed (torch's rule, and torch's ValueError)."""
    given = tensors is not None and not (isinstance(tensors, (list, tuple)) and len(tensors) == 0)
    title = "destination" if role == "dst" else "source"
    if rank != root:
        if given:
            raise ArgumentError(
                f"Argument {what} must NOT be specified on non-{title} ranks: this "
                f"is group rank {rank} and {role} is {root}; pass None here"
            )
        return None
    if not given:
        raise ArgumentError(
            f"Argument {what} must be specified on the {title} rank ({role} "
            f"{root}): pass a list of {size} tensors"
        )
    bufs = buffer_list(tensors, size, what, writable=writable)
    same_dtype([("tensor", mine), *((f"{what}[{i}]", b) for i, b in enumerate(bufs))])
    for i, b in enumerate(bufs):
        same_count(
            b, mine.count, f"{what}[{i}]", f"every rank's block has the size of tensor ({mine.describe()})"
        )
    return bufs


def same_dtype(named: Sequence[tuple[str, Buffer]]) -> None:
    """Every buffer has the element type of the first (torch: ValueError otherwise)."""
    first_name, first = named[0]
    for name, buf in named[1:]:
        if buf.dtype_name != first.dtype_name:
            raise ArgumentError(
                f"{name} is {buf.describe()} but {first_name} is {first.describe()}: "
                f"the tensors of one collective must all have the same dtype"
            )


def same_count(buf: Buffer, count: int, what: str, why: str) -> None:
    if buf.count != count:
        raise ArgumentError(
            f"{what} is {buf.describe()} ({buf.count} elements) but must hold {count} elements: {why}"
        )


def equal_chunks(flat: np.ndarray, parts: int) -> list[np.ndarray]:
    """``flat`` cut into ``parts`` equal consecutive views (the caller checked divisibility)."""
    step = flat.size // parts if parts else 0
    return [flat[i * step : (i + 1) * step] for i in range(parts)]


def row_splits(buf: Buffer, split_sizes: Any, size: int, what: str) -> tuple[list[np.ndarray], bool]:
    """Views of ``buf`` cut along dim 0 into ``size`` pieces (all_to_all_single).

    ``split_sizes`` None or empty: equal pieces (dim 0 must divide evenly). Returns the
    views and whether the split was the default (even) one.
    """
    if not buf.shape:
        raise ArgumentError(
            f"{what} is a 0-d tensor; all_to_all_single splits along dim 0, so it "
            f"needs at least one dimension"
        )
    rows = buf.shape[0]
    if split_sizes is None or len(split_sizes) == 0:
        if rows % size:
            raise ArgumentError(
                f"{what} has {rows} rows along dim 0, which do not split evenly "
                f"among {size} ranks: pass {what}_split_sizes"
            )
        return equal_chunks(buf.flat, size), True
    splits = _int_list(split_sizes, f"{what}_split_sizes")
    if len(splits) != size:
        raise ArgumentError(
            f"{what}_split_sizes has {len(splits)} entries, but the group has {size} ranks: give one per rank"
        )
    if any(s < 0 for s in splits):
        raise ArgumentError(f"{what}_split_sizes {splits} has a negative entry")
    if sum(splits) != rows:
        raise ArgumentError(
            f"{what}_split_sizes {splits} sum to {sum(splits)}, but {what} has "
            f"{rows} rows along dim 0 ({buf.describe()}): they must sum to dim 0"
        )
    per_row = math.prod(buf.shape[1:])
    views, start = [], 0
    for s in splits:
        views.append(buf.flat[start * per_row : (start + s) * per_row])
        start += s
    return views, False


def _int_list(values: Any, what: str) -> list[int]:
    if hasattr(values, "tolist"):  # a tensor or an array of sizes
        values = values.tolist()
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{what} must be a list of ints, got {values!r}") from None
    if any(isinstance(v, bool) for v in values):
        raise ArgumentTypeError(f"{what} must be a list of ints, got {values!r}")
    return out


# -- per collective: the checks both paths make (collective_ops' long path, short_paths' plans)
def all_gather_buffers(rank: int, size: int, tensor_list: Any, tensor: Any) -> tuple[Buffer, list[Buffer]]:
    """all_gather's (input, outputs): outputs[i] receives rank i's input, sizes may differ."""
    inp = as_buffer(tensor, writable=False)
    outs = buffer_list(tensor_list, size, "tensor_list", writable=True)
    same_dtype([("tensor", inp), *((f"tensor_list[{i}]", o) for i, o in enumerate(outs))])
    same_count(outs[rank], inp.count, f"tensor_list[{rank}]", "it receives this rank's own tensor")
    return inp, outs


def all_gather_into_tensor_buffers(size: int, output_tensor: Any, input_tensor: Any) -> tuple[Buffer, Buffer]:
    """all_gather_into_tensor's (input, output): the output holds size × the input."""
    inp = as_buffer(input_tensor, writable=False, what="input_tensor")
    out = as_buffer(output_tensor, writable=True, what="output_tensor")
    same_dtype([("input_tensor", inp), ("output_tensor", out)])
    same_count(
        out,
        size * inp.count,
        "output_tensor",
        f"group size × input_tensor's {inp.count} elements ({size} × {inp.describe()})",
    )
    return inp, out


def reduce_scatter_buffers(rank: int, size: int, output: Any, input_list: Any) -> tuple[Buffer, list[Buffer]]:
    """reduce_scatter's (output, inputs): inputs[rank] is reduced into this rank's output."""
    out = as_buffer(output, writable=True, what="output")
    ins = buffer_list(input_list, size, "input_list", writable=False)
    same_dtype([("output", out), *((f"input_list[{i}]", b) for i, b in enumerate(ins))])
    same_count(ins[rank], out.count, f"input_list[{rank}]", "it is reduced into this rank's output")
    return out, ins


def reduce_scatter_tensor_buffers(size: int, output: Any, input: Any) -> tuple[Buffer, Buffer]:  # noqa: A002
    """reduce_scatter_tensor's (output, input): the input holds size × the output."""
    out = as_buffer(output, writable=True, what="output")
    inp = as_buffer(input, writable=False, what="input")
    same_dtype([("output", out), ("input", inp)])
    same_count(
        inp,
        size * out.count,
        "input",
        f"group size × output's {out.count} elements ({size} × {out.describe()})",
    )
    return out, inp


def all_to_all_buffers(
    rank: int, size: int, output_tensor_list: Any, input_tensor_list: Any
) -> tuple[list[Buffer], list[Buffer]]:
    """all_to_all's (outputs, inputs): outputs[j] gets rank j's inputs[rank]; sizes may differ."""
    outs = buffer_list(output_tensor_list, size, "output_tensor_list", writable=True)
    ins = buffer_list(input_tensor_list, size, "input_tensor_list", writable=False)
    same_dtype(
        [
            *((f"input_tensor_list[{i}]", b) for i, b in enumerate(ins)),
            *((f"output_tensor_list[{i}]", b) for i, b in enumerate(outs)),
        ]
    )
    same_count(
        outs[rank],
        ins[rank].count,
        f"output_tensor_list[{rank}]",
        f"it receives this rank's own input_tensor_list[{rank}]",
    )
    return outs, ins


def all_to_all_single_buffers(
    rank: int,
    size: int,
    output: Any,
    input: Any,  # noqa: A002
    output_split_sizes: Any,
    input_split_sizes: Any,
) -> tuple[Buffer, Buffer, list[np.ndarray], list[np.ndarray], bool]:
    """all_to_all_single's (output, input, output pieces, input pieces, even): both cut along
    dim 0, evenly or by the split sizes; this rank's own piece must fit its output piece."""
    out = as_buffer(output, writable=True, what="output")
    inp = as_buffer(input, writable=False, what="input")
    same_dtype([("input", inp), ("output", out)])
    outs, even_out = row_splits(out, output_split_sizes, size, "output")
    ins, even_in = row_splits(inp, input_split_sizes, size, "input")
    if outs[rank].size != ins[rank].size:
        raise ArgumentError(
            f"this rank keeps input piece {rank} ({ins[rank].size} elements) in output "
            f"piece {rank}, which holds {outs[rank].size}: check the split sizes"
        )
    return out, inp, outs, ins, even_in and even_out
