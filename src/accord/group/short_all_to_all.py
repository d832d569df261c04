"""The short path of all_to_all on plain NumPy arrays: the list form, and all_to_all_single
cut evenly or by split sizes, blocking or queued (``async_op=True``, torch's functional
``all_to_all_single``).

Owns: per form, the front check (plain arrays, or plain CPU torch tensors seen as arrays),
the plan (the long path's argument checks, algorithm choice and fingerprint, made once per
call signature through ``plans.cached_plan``: for all_to_all_single the split sizes are
part of the signature, so a program that repeats its splits plans them once, and one whose
splits change every call — a mixture of experts — pays the plan, the long path's checks,
on each new set; those are kept only while the cache has room, ``SPLIT_PLANS_ROOM``) and,
for an even call on one shared-memory slot, its
compiled single round. A call with split sizes has the long path's fingerprint for split
sizes (no count), even when they are even: ranks on either path meet. Split from
``short_exchanges`` (which keeps all_gather and reduce_scatter) so that each stays under
400 lines. Must not know about the default world or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays import plain_view
from ..collectives import shm_exchange
from ..collectives.registry import Algorithm
from ..transport.wire import Fingerprint
from . import one_round
from .arguments import all_to_all_buffers, all_to_all_single_buffers
from .plans import (
    MAX_PLANS,
    cached_plan,
    choose,
    defer_run,
    flat_view,
    list_views,
    plain_array,
    run_plan,
    scan_list,
    shared_plan,
)
from .process_group import ProcessGroup

_NDARRAY = np.ndarray
#: A new set of split sizes is kept as a plan only while the group holds fewer plans than
#: this: a mixture of experts whose splits change every call must not fill the cache to
#: ``MAX_PLANS``, which would empty it of every other collective's plan as well.
SPLIT_PLANS_ROOM = MAX_PLANS // 2


def all_to_all(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    run = _exchanging_lists(group, list_views(args[0]), list_views(args[1]))
    if run is None:
        return False
    run()
    return True


def all_to_all_async(
    group: ProcessGroup,
    outputs: Any,
    inputs: Any,
    make: Callable[..., Any] | None = None,
    tensors: Any = None,
) -> Any:
    """``all_to_all(output_list, input_list, async_op=True)`` queued as its short path (the
    plan made now); None: take the long path. ``tensors``: the caller's (outputs, inputs)
    when the lists hold views of them, held until the call ran; ``make``: the Work's class
    (``Planner.defer``)."""
    run = _exchanging_lists(group, list_views(outputs), list_views(inputs))
    if run is None:
        return None
    outs, held = tensors if tensors is not None else (outputs, inputs)
    result = [list(outs)]
    return defer_run(group, "all_to_all", run, result, held, make)


def _exchanging_lists(group: ProcessGroup, outputs: Any, inputs: Any) -> Callable[[], None] | None:
    """The short path of one all_to_all of lists, ready to run (None: not plannable)."""
    n = group.size()
    if not group.engine.plannable:
        return None
    scanned_out, scanned_in = scan_list(outputs, n, True), scan_list(inputs, n, False)
    if scanned_out is None or scanned_in is None:
        return None
    plan = cached_plan(
        group, ("all_to_all", scanned_out[0], scanned_in[0]), _plan_all_to_all, outputs, inputs
    )
    if plan is None:
        return None
    outs, ins = scanned_out[1], scanned_in[1]

    def run() -> None:
        run_plan(group, "all_to_all", plan, (outs, ins), (outs, ins), (inputs,))

    return run


def _plan_all_to_all(
    group: ProcessGroup, outputs: list[np.ndarray], inputs: list[np.ndarray]
) -> tuple[Any, ...] | None:
    _, ins = all_to_all_buffers(group.rank(), group.size(), outputs, inputs)
    algorithm, fp = choose(group, "all_to_all", 0, ins[0], count=0)
    count = inputs[0].size
    even = all(o.size == count for o in outputs) and all(i.size == count for i in inputs)
    return shared_plan(
        algorithm, fp, _compile_all_to_all(group, algorithm, fp, count, ins[0].flat.dtype) if even else None
    )


def _compile_all_to_all(
    group: ProcessGroup, algorithm: Algorithm, fp: Fingerprint, count: int, dtype: np.dtype
) -> Callable[..., bool] | None:
    """Every rank sends and receives ``count`` elements to and from every rank."""
    n = group.size()
    if (
        algorithm.run is not shm_exchange.all_to_all
        or group.planner.call_slots is None
        or not shm_exchange.all_to_all_fits(n, count, dtype.itemsize, group.planner.call_slots.slot_bytes)
    ):
        return None
    return one_round.compile_call(
        group,
        "all_to_all",
        fp,
        8 * n + n * count * dtype.itemsize,
        shm_exchange.all_to_all_round(group.rank(), n, count, dtype),
    )


def all_to_all_single(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    """Piece j of dim 0 (equal pieces, or cut by the split sizes) goes to rank j."""
    output, inp, output_split_sizes, input_split_sizes = args
    if type(output) is not _NDARRAY or type(inp) is not _NDARRAY:
        output, inp = plain_view(output), plain_view(inp)
    if group.engine.direct is not None:
        return group.engine.direct.all_to_all_single(  # type: ignore[no-any-return]
            output, inp, output_split_sizes, input_split_sizes
        )
    run = _exchanging(group, output, inp, output_split_sizes, input_split_sizes)
    if run is None:
        return False
    run()
    return True


def all_to_all_single_async(
    group: ProcessGroup,
    output: Any,
    inp: Any,
    output_split_sizes: Any,
    input_split_sizes: Any,
    make: Callable[..., Any] | None = None,
    tensors: tuple[Any, Any] | None = None,
) -> Any:
    """``all_to_all_single(async_op=True)`` queued as its short path (the plan made now: a
    bad argument raises here, at the call); None: take the long path. ``tensors``: the
    caller's (output, input) when ``output`` and ``inp`` are views of them, held until the
    call ran; ``make``: the Work's class (``Planner.defer``)."""
    run = _exchanging(group, plain_view(output), plain_view(inp), output_split_sizes, input_split_sizes)
    if run is None:
        return None
    out, held = tensors if tensors is not None else (output, inp)
    return defer_run(group, "all_to_all", run, [out], held, make)


def _splits_key(splits: Any) -> tuple[int, ...] | bool | None:
    """Split sizes as part of a plan's key: None for none (the even form), a tuple of ints,
    or False: not a plain list of ints (a tensor of sizes…): the long path reads those."""
    if splits is None:
        return None
    if type(splits) is list or type(splits) is tuple:
        if not splits:
            return None
        for s in splits:
            if type(s) is not int:
                return False
        return tuple(splits)
    return False


def _exchanging(
    group: ProcessGroup, output: Any, inp: Any, output_split_sizes: Any, input_split_sizes: Any
) -> Callable[[], None] | None:
    """The short path of one all_to_all_single, ready to run (None: not plannable)."""
    if not (group.engine.plannable and plain_array(output, True) and plain_array(inp, False)):
        return None
    outs, ins = _splits_key(output_split_sizes), _splits_key(input_split_sizes)
    if outs is False or ins is False:
        return None
    key = ("all_to_all_single", output.dtype, output.shape, inp.dtype, inp.shape, outs, ins)
    split = outs is not None or ins is not None
    if split and len(group.plans) >= SPLIT_PLANS_ROOM and key not in group.plans:
        plan = _plan_all_to_all_single(group, output, inp, outs, ins)  # (made, not kept: see above)
    else:
        plan = cached_plan(group, key, _plan_all_to_all_single, output, inp, outs, ins)
    if plan is None:
        return None
    fp, algorithm, out_bounds, in_bounds, compiled = plan
    flat_out, flat_in = flat_view(output), flat_view(inp)

    def run() -> None:
        if compiled is None or not compiled(flat_out, flat_in):
            pieces_out = [flat_out[a:b] for a, b in out_bounds]
            pieces_in = [flat_in[a:b] for a, b in in_bounds]
            group.planner.run_planned("all_to_all", fp, algorithm, (pieces_out, pieces_in), (inp,))

    return run


def _plan_all_to_all_single(
    group: ProcessGroup, output: np.ndarray, inp: np.ndarray, outs: Any, ins: Any
) -> tuple[Any, ...] | None:
    """As ``collective_ops.all_to_all_single`` decides: the same checks (they raise the same
    errors), algorithm and fingerprint; each piece as (start, stop) in the flat array."""
    o, i, out_pieces, in_pieces, even = all_to_all_single_buffers(
        group.rank(), group.size(), output, inp, outs, ins
    )
    algorithm, fp = choose(group, "all_to_all", i.nbytes if even else 0, i, count=i.count if even else 0)
    n = group.size()
    compiled = None
    if even and n and o.count == i.count and i.count % n == 0:
        compiled = _compile_all_to_all(group, algorithm, fp, i.count // n, i.flat.dtype)
    return shared_plan(algorithm, fp, _bounds(out_pieces, o.flat), _bounds(in_pieces, i.flat), compiled)


def _bounds(pieces: list[np.ndarray], flat: np.ndarray) -> list[tuple[int, int]]:
    """Where each piece (a view of ``flat``) starts and stops in it, in elements."""
    base, size = flat.__array_interface__["data"][0], flat.itemsize
    bounds = []
    for piece in pieces:
        start = (piece.__array_interface__["data"][0] - base) // size if piece.size else 0
        bounds.append((start, start + piece.size))
    return bounds
