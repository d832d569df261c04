"""The short path of the blocking exchanges on plain NumPy arrays: all_gather and
reduce_scatter, in their list and tensor forms (all_to_all's are ``short_all_to_all``').

Owns: per form, the front check (plain arrays, or plain CPU torch tensors seen as arrays),
the plan (the long path's argument checks, algorithm choice and fingerprint, made once per
call signature through ``plans.cached_plan``) and, for an even call on one
shared-memory slot, its compiled single round. The plumbing they share with ``short_paths``
(the plan cache, ``choose``, the list scan) is ``plans``'; as there, a call on backend mpi goes to the
group's ``direct`` path and anything not plannable returns False for the long path. Must not
know about the default world or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays import Buffer, plain_view
from ..collectives import shm_exchange
from ..collectives.registry import Algorithm
from ..reduce_ops import Kernel, as_reduce_op, make_kernel
from ..transport.wire import Fingerprint
from . import one_round
from .arguments import (
    all_gather_buffers,
    all_gather_into_tensor_buffers,
    equal_chunks,
    reduce_scatter_buffers,
    reduce_scatter_tensor_buffers,
)
from .plans import (
    cached_plan,
    choose,
    defer_run,
    finalizer,
    flat_view,
    list_views,
    plain_array,
    run_plan,
    scan_list,
    shared_plan,
)
from .process_group import ProcessGroup

_NDARRAY = np.ndarray


# -- all_gather ---------------------------------------------------------------------------------
def all_gather_into_tensor(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    output, inp = args
    if type(output) is not _NDARRAY or type(inp) is not _NDARRAY:
        output, inp = plain_view(output), plain_view(inp)
    if group.engine.direct is not None:
        return group.engine.direct.all_gather_into_tensor(output, inp)  # type: ignore[no-any-return]
    run = _gathering(group, output, inp)
    if run is None:
        return False
    run()
    return True


def all_gather_into_tensor_async(
    group: ProcessGroup,
    output: Any,
    inp: Any,
    make: Callable[..., Any] | None = None,
    tensors: tuple[Any, Any] | None = None,
) -> Any:
    """``all_gather_into_tensor(async_op=True)`` queued as its short path (the plan made
    now); None: take the long path. The queued call holds the caller's tensors: ``output``
    and ``inp``, or ``tensors`` (output, input) when those are views of them (a view of a
    plain tensor does not keep it alive). ``make``: the Work's class (``Planner.defer``)."""
    views = plain_view(output), plain_view(inp)
    run = _gathering(group, *views)
    if run is None:
        return None
    out, held = tensors if tensors is not None else (output, inp)
    return defer_run(group, "all_gather", run, [out], held, make)


def _gathering(group: ProcessGroup, output: Any, inp: Any) -> Callable[[], None] | None:
    """The short path of one all_gather_into_tensor, ready to run (None: not plannable)."""
    if not (group.engine.plannable and plain_array(output, True) and plain_array(inp, False)):
        return None
    plan = cached_plan(
        group,
        ("all_gather_into_tensor", output.dtype, output.size, inp.dtype, inp.size),
        _plan_all_gather_into_tensor,
        output,
        inp,
    )
    if plan is None:
        return None
    flat_in, flat_out = flat_view(inp), flat_view(output)
    compiled = plan[-1]

    def run() -> None:
        if compiled is None or not compiled(flat_in, flat_out):
            group.planner.run_planned(
                "all_gather", plan[0], plan[1], (flat_in, equal_chunks(flat_out, group.size())), (inp,)
            )

    return run


def _plan_all_gather_into_tensor(
    group: ProcessGroup, output: np.ndarray, inp: np.ndarray
) -> tuple[Any, ...] | None:
    i, o = all_gather_into_tensor_buffers(group.size(), output, inp)
    algorithm, fp = choose(group, "all_gather", o.nbytes, i, count=o.count)
    return shared_plan(algorithm, fp, _compile_all_gather(group, algorithm, fp, i))


def _compile_all_gather(
    group: ProcessGroup, algorithm: Algorithm, fp: Fingerprint, inp: Buffer
) -> Callable[..., bool] | None:
    """Every rank gives ``inp.count`` elements (the plan's signature says so)."""
    if algorithm.run is not shm_exchange.all_gather:
        return None
    return one_round.compile_call(
        group,
        "all_gather",
        fp,
        inp.nbytes,
        shm_exchange.all_gather_round(group.rank(), group.size(), inp.count, inp.flat.dtype),
    )


def all_gather(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    outputs, inp = list_views(args[0]), plain_view(args[1])
    if group.engine.direct is not None:
        return group.engine.direct.all_gather(outputs, inp)  # type: ignore[no-any-return]
    run = _gathering_list(group, outputs, inp)
    if run is None:
        return False
    run()
    return True


def all_gather_async(
    group: ProcessGroup, outputs: Any, inp: Any, make: Callable[..., Any] | None = None, tensors: Any = None
) -> Any:
    """``all_gather(tensor_list, tensor, async_op=True)`` queued as its short path (the plan
    made now); None: take the long path. ``tensors``: the caller's (list, tensor) when
    ``outputs`` and ``inp`` are views of them, held until the call ran; ``make``: the
    Work's class (``Planner.defer``)."""
    run = _gathering_list(group, list_views(outputs), plain_view(inp))
    if run is None:
        return None
    outs, held = tensors if tensors is not None else (outputs, inp)
    result = [list(outs)]
    return defer_run(group, "all_gather", run, result, held, make)


def _gathering_list(group: ProcessGroup, outputs: Any, inp: Any) -> Callable[[], None] | None:
    """The short path of one all_gather into a list, ready to run (None: not plannable)."""
    if not (group.engine.plannable and plain_array(inp, False)):
        return None
    scanned = scan_list(outputs, group.size(), True)
    if scanned is None:
        return None
    plan = cached_plan(group, ("all_gather", inp.dtype, inp.size, scanned[0]), _plan_all_gather, outputs, inp)
    if plan is None:
        return None
    flat_in, flats = flat_view(inp), scanned[1]

    def run() -> None:
        run_plan(group, "all_gather", plan, (flat_in, flats), (flat_in, flats), (inp,))

    return run


def _plan_all_gather(
    group: ProcessGroup, outputs: list[np.ndarray], inp: np.ndarray
) -> tuple[Any, ...] | None:
    i, outs = all_gather_buffers(group.rank(), group.size(), outputs, inp)
    total = sum(o.count for o in outs)
    algorithm, fp = choose(group, "all_gather", total * i.itemsize, i, count=total)
    even = all(o.count == i.count for o in outs)
    return shared_plan(algorithm, fp, _compile_all_gather(group, algorithm, fp, i) if even else None)


# -- reduce_scatter ---------------------------------------------------------------------------
def reduce_scatter_tensor(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    output, inp, op = args
    if type(output) is not _NDARRAY or type(inp) is not _NDARRAY:
        output, inp = plain_view(output), plain_view(inp)
    if group.engine.direct is not None:
        return group.engine.direct.reduce_scatter_tensor(output, inp, op)  # type: ignore[no-any-return]
    run = _scattering(group, output, inp, op)
    if run is None:
        return False
    run()
    return True


def reduce_scatter_tensor_async(
    group: ProcessGroup,
    output: Any,
    inp: Any,
    op: Any,
    make: Callable[..., Any] | None = None,
    tensors: tuple[Any, Any] | None = None,
) -> Any:
    """``reduce_scatter_tensor(async_op=True)``, as ``all_gather_into_tensor_async``."""
    views = plain_view(output), plain_view(inp)
    run = _scattering(group, *views, op)
    if run is None:
        return None
    out, held = tensors if tensors is not None else (output, inp)
    return defer_run(group, "reduce_scatter", run, [out], held, make)


def _scattering(group: ProcessGroup, output: Any, inp: Any, op: Any) -> Callable[[], None] | None:
    """The short path of one reduce_scatter_tensor, ready to run (None: not plannable)."""
    if not (group.engine.plannable and plain_array(output, True) and plain_array(inp, False)):
        return None
    plan = cached_plan(
        group,
        ("reduce_scatter_tensor", op, output.dtype, output.size, inp.dtype, inp.size),
        _plan_reduce_scatter_tensor,
        output,
        inp,
        op,
    )
    if plan is None:
        return None
    flat_out, flat_in = flat_view(output), flat_view(inp)
    compiled = plan[-1]

    def run() -> None:
        if compiled is None or not compiled(flat_out, flat_in):
            group.planner.run_planned(
                "reduce_scatter",
                plan[0],
                plan[1],
                (flat_out, equal_chunks(flat_in, group.size()), plan[2]),
                (inp,),
            )

    return run


def _plan_reduce_scatter_tensor(
    group: ProcessGroup, output: np.ndarray, inp: np.ndarray, op: Any
) -> tuple[Any, ...] | None:
    o, i = reduce_scatter_tensor_buffers(group.size(), output, inp)
    kernel = make_kernel(as_reduce_op(op), o.flat.dtype, o.dtype_name)
    algorithm, fp = choose(group, "reduce_scatter", i.nbytes, o, count=i.count)
    return shared_plan(algorithm, fp, kernel, _compile_reduce_scatter(group, algorithm, fp, o, kernel))


def _compile_reduce_scatter(
    group: ProcessGroup, algorithm: Algorithm, fp: Fingerprint, out: Buffer, kernel: Kernel
) -> Callable[..., bool] | None:
    """Every rank's block for every rank is ``out.count`` elements (the plan's signature)."""
    if algorithm.run is not shm_exchange.reduce_scatter or kernel.ufunc is None or out.count == 0:
        return None
    n = group.size()
    return one_round.compile_call(
        group,
        "reduce_scatter",
        fp,
        n * out.nbytes,
        shm_exchange.reduce_scatter_round(
            group.rank(), n, out.count, out.flat.dtype, kernel.ufunc, finalizer(kernel)
        ),
    )


def reduce_scatter(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    run = _scattering_list(group, plain_view(args[0]), list_views(args[1]), args[2])
    if run is None:
        return False
    run()
    return True


def reduce_scatter_async(
    group: ProcessGroup,
    output: Any,
    inputs: Any,
    op: Any,
    make: Callable[..., Any] | None = None,
    tensors: Any = None,
) -> Any:
    """``reduce_scatter(output, input_list, async_op=True)`` queued as its short path (the
    plan made now); None: take the long path. ``tensors``: the caller's (output, list) when
    ``output`` and ``inputs`` are views of them, held until the call ran; ``make``: the
    Work's class (``Planner.defer``)."""
    run = _scattering_list(group, plain_view(output), list_views(inputs), op)
    if run is None:
        return None
    out, held = tensors if tensors is not None else (output, inputs)
    return defer_run(group, "reduce_scatter", run, [out], held, make)


def _scattering_list(group: ProcessGroup, output: Any, inputs: Any, op: Any) -> Callable[[], None] | None:
    """The short path of one reduce_scatter of a list, ready to run (None: not plannable)."""
    if not (group.engine.plannable and plain_array(output, True)):
        return None
    scanned = scan_list(inputs, group.size(), False)
    if scanned is None:
        return None
    key = ("reduce_scatter", op, output.dtype, output.size, scanned[0])
    plan = cached_plan(group, key, _plan_reduce_scatter, output, inputs, op)
    if plan is None:
        return None
    flat_out, flats = flat_view(output), scanned[1]

    def run() -> None:
        run_plan(group, "reduce_scatter", plan, (flat_out, flats, plan[2]), (flat_out, flats), (inputs,))

    return run


def _plan_reduce_scatter(
    group: ProcessGroup, output: np.ndarray, inputs: list[np.ndarray], op: Any
) -> tuple[Any, ...] | None:
    o, ins = reduce_scatter_buffers(group.rank(), group.size(), output, inputs)
    total = sum(b.count for b in ins)
    kernel = make_kernel(as_reduce_op(op), o.flat.dtype, o.dtype_name)
    algorithm, fp = choose(group, "reduce_scatter", total * o.itemsize, o, count=total)
    even = all(b.count == o.count for b in ins)
    return shared_plan(
        algorithm, fp, kernel, _compile_reduce_scatter(group, algorithm, fp, o, kernel) if even else None
    )
