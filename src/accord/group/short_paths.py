"""The short path of blocking collectives on plain NumPy arrays.

Owns: the short paths of all_reduce, broadcast, barrier, reduce, gather and scatter, each a
check that its arguments are plain, a cached plan and a run (all_gather and reduce_scatter
are ``short_exchanges``', all_to_all ``short_all_to_all``'s). What every short path is
made of — the plan cache (``cached_plan``), ``choose`` (algorithm and fingerprint, shared
with the long path), the argument scans and ``run_plan`` — is ``plans``' (split from here
so that this module and the other two build on it and each stays under 400 lines). A short
path applies when every argument is a C-contiguous ``numpy.ndarray`` (outputs writeable) or a
plain CPU torch tensor (seen as one: ``arrays.plain_view``),
the call is blocking and the group runs on accord's own engine (shared memory or messages,
not backend mpi's); it returns False otherwise and the caller takes the long path, which
explains what is wrong with an argument. What a plan skips on later calls: Buffer objects,
argument checks, the algorithm choice, the fingerprint; a shared-memory algorithm also
skips the call's Peers and Work (``MeshEngine.run_planned``). A hierarchical call is never
planned: it runs as calls of the inner groups, each planned there. Must not know about the
default world or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays import as_buffer, plain_view
from ..collectives import shm, shm_rooted
from ..reduce_ops import as_reduce_op, make_kernel
from . import one_round
from .arguments import root_list
from .plans import (
    cached_plan,
    choose,
    finalizer,
    flat_view,
    list_views,
    plain_array,
    run_plan,
    scan_like,
    shared_plan,
)
from .process_group import ProcessGroup

_NDARRAY = np.ndarray


# -- all_reduce, broadcast, barrier ------------------------------------------------------------
def all_reduce(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    tensor, op = args
    if type(tensor) is not _NDARRAY:
        tensor = plain_view(tensor)  # a plain CPU torch tensor: its memory as an array
    if group.engine.direct is not None:  # another engine's own short path (engines.mpi)
        return group.engine.direct.all_reduce(tensor, op)  # type: ignore[no-any-return]
    if type(tensor) is _NDARRAY:  # (``direct`` None: the group is plannable)
        flags = tensor.flags  # written out: it is most of a small call's cost
        if flags.c_contiguous and flags.writeable:
            key = ("all_reduce", op, tensor.dtype, tensor.size)
            try:
                plan = group.plans[key]
            except (KeyError, TypeError):
                plan = cached_plan(group, key, _plan_all_reduce, tensor, op)
            if plan is not None:
                flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
                compiled = plan[3]
                if compiled is None or not compiled(flat):
                    group.planner.run_planned("all_reduce", plan[0], plan[1], (flat, plan[2]), (tensor,))
                return True
    return False


def all_reduce_async(
    group: ProcessGroup, tensor: Any, op: Any, keep: Any = None, make: Callable[..., Any] | None = None
) -> Any:
    """``all_reduce(async_op=True)`` queued as its short path (its plan made now: a bad
    argument raises here, at the call); None: take the long path. The queued call holds
    ``tensor`` (or ``keep``, the tensors a view was made of) until it ran: a view of a plain
    torch tensor does not keep the tensor alive (``plain_view``). ``make``: the Work's
    class, as ``Planner.defer`` takes it (None: an accord Work)."""
    array = tensor if type(tensor) is _NDARRAY else plain_view(tensor)
    if not (group.engine.plannable and plain_array(array, True)):
        return None
    key = ("all_reduce", op, array.dtype, array.size)
    plan = cached_plan(group, key, _plan_all_reduce, array, op)
    if plan is None:
        return None
    flat, result = flat_view(array), [tensor] if keep is None else keep
    fp, algorithm, kernel, compiled = plan

    def run() -> list[Any]:
        if compiled is None or not compiled(flat):
            group.planner.run_planned("all_reduce", fp, algorithm, (flat, kernel), (array,))
        return result

    return group.planner.defer("all_reduce", run, result, result, make)


def all_reduce_flat_async(
    group: ProcessGroup, flat: np.ndarray, op: Any, keep: Any, make: Callable[..., Any] | None = None
) -> Any:
    """``all_reduce_async`` for a 1-D plain array the caller vouches for (``keep``: the
    tensors it is a view of), with its plan looked up first (the fast path)."""
    if group.engine.plannable:
        plan = group.plans.get(("all_reduce", op, flat.dtype, flat.size))
        if plan is not None:
            fp, algorithm, kernel, compiled = plan

            def run() -> Any:
                if compiled is None or not compiled(flat):
                    group.planner.run_planned("all_reduce", fp, algorithm, (flat, kernel), (flat,))
                return keep

            return group.planner.defer("all_reduce", run, keep, keep, make)
        return all_reduce_async(group, flat, op, keep, make)  # (its plan made now)
    return None


def all_reduce_flat(group: ProcessGroup, flat: np.ndarray, op: Any) -> bool:
    """``all_reduce`` for a 1-D plain array the caller vouches for, once its plan exists."""
    if group.engine.plannable:
        plan = group.plans.get(("all_reduce", op, flat.dtype, flat.size))
        if plan is not None:
            compiled = plan[3]
            if compiled is None or not compiled(flat):
                group.planner.run_planned("all_reduce", plan[0], plan[1], (flat, plan[2]), (flat,))
            return True
    return False


def _plan_all_reduce(group: ProcessGroup, tensor: np.ndarray, op: Any) -> tuple[Any, ...] | None:
    buf = as_buffer(tensor, writable=True)
    kernel = make_kernel(as_reduce_op(op), buf.flat.dtype, buf.dtype_name)
    algorithm, fp = choose(group, "all_reduce", buf.nbytes, buf)
    compiled = None
    bodies = {shm.one_shot: shm.one_shot_round, shm.reduce_broadcast: shm.reduce_broadcast_round}
    body = bodies.get(algorithm.run)
    if body is not None and kernel.ufunc is not None:
        compiled = one_round.compile_call(
            group,
            "all_reduce",
            fp,
            buf.nbytes,
            body(group.rank(), group.size(), buf.count, buf.flat.dtype, kernel.ufunc, finalizer(kernel)),
        )
    return shared_plan(algorithm, fp, kernel, compiled)


def broadcast(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    """(``src`` checked by the caller.)"""
    tensor, src = args
    if type(tensor) is not _NDARRAY:
        tensor = plain_view(tensor)  # a plain CPU torch tensor: its memory as an array
    if group.engine.direct is not None:
        return group.engine.direct.broadcast(tensor, src)  # type: ignore[no-any-return]
    if type(tensor) is _NDARRAY:  # (``direct`` None: the group is plannable; written out as
        flags = tensor.flags  # all_reduce's: the root's path to its posted data is the
        if flags.c_contiguous and (flags.writeable or group.rank() == src):  # others' wait)
            key = ("broadcast", src, tensor.dtype, tensor.size)
            try:
                plan = group.plans[key]
            except (KeyError, TypeError):
                plan = cached_plan(group, key, _plan_broadcast, tensor, src)
            if plan is not None:
                flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
                compiled = plan[2]
                if compiled is None or not compiled(flat):
                    group.planner.run_planned("broadcast", plan[0], plan[1], (flat, src), (tensor,))
                return True
    return False


def broadcast_async(
    group: ProcessGroup, tensor: Any, src: int, keep: Any = None, make: Callable[..., Any] | None = None
) -> Any:
    """``broadcast(async_op=True)`` queued as its short path (``src`` checked by the
    caller); None: take the long path. ``keep`` and ``make``: as for ``all_reduce_async``."""
    array = tensor if type(tensor) is _NDARRAY else plain_view(tensor)
    if not (group.engine.plannable and plain_array(array, group.rank() != src)):
        return None
    plan = cached_plan(group, ("broadcast", src, array.dtype, array.size), _plan_broadcast, array, src)
    if plan is None:
        return None
    flat, result = flat_view(array), [tensor] if keep is None else keep

    def run() -> list[Any]:
        run_plan(group, "broadcast", plan, (flat, src), (flat,), (array,))
        return result

    return group.planner.defer("broadcast", run, result, result, make)


def broadcast_flat(group: ProcessGroup, flat: np.ndarray, src: int) -> bool:
    """``broadcast`` for a 1-D plain array the caller vouches for, once its plan exists."""
    if group.engine.plannable and 0 <= src < group.size():
        plan = group.plans.get(("broadcast", src, flat.dtype, flat.size))
        if plan is not None:
            run_plan(group, "broadcast", plan, (flat, src), (flat,), (flat,))
            return True
    return False


def _plan_broadcast(group: ProcessGroup, tensor: np.ndarray, src: int) -> tuple[Any, ...] | None:
    buf = as_buffer(tensor, writable=group.rank() != src)
    algorithm, fp = choose(group, "broadcast", buf.nbytes, buf, root=src)
    compiled = None
    if algorithm.run is shm.broadcast:
        compiled = one_round.compile_call(
            group,
            "broadcast",
            fp,
            buf.nbytes,
            shm.broadcast_round(group.rank(), group.size(), src, buf.count, buf.flat.dtype),
        )
    return shared_plan(algorithm, fp, compiled)


def barrier(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    if group.engine.direct is not None:
        return group.engine.direct.barrier()  # type: ignore[no-any-return]
    if not group.engine.plannable:
        return False
    plan = cached_plan(group, ("barrier",), _plan_barrier)
    if plan is None:
        return False
    run_plan(group, "barrier", plan, (), (), ())
    return True


def _plan_barrier(group: ProcessGroup) -> tuple[Any, ...] | None:
    algorithm, fp = choose(group, "barrier", 0, None)
    compiled = None
    if algorithm.run is shm.barrier:  # no data: the round's views are one byte
        compiled = one_round.compile_call(
            group, "barrier", fp, 1, shm.barrier_round(group.rank(), group.size())
        )
    return shared_plan(algorithm, fp, compiled)


# -- rooted: reduce, gather, scatter ------------------------------------------------------------
def reduce(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    tensor, dst, op = args
    if type(tensor) is not _NDARRAY:
        tensor = plain_view(tensor)
    if group.engine.direct is not None:
        return group.engine.direct.reduce(tensor, dst, op)  # type: ignore[no-any-return]
    if not (group.engine.plannable and type(dst) is int and plain_array(tensor, dst == group.rank())):
        return False
    plan = cached_plan(group, ("reduce", op, dst, tensor.dtype, tensor.size), _plan_reduce, tensor, dst, op)
    if plan is None:
        return False
    flat = flat_view(tensor)
    run_plan(group, "reduce", plan, (flat, plan[2], dst), (flat,), (tensor,))
    return True


def _plan_reduce(group: ProcessGroup, tensor: np.ndarray, dst: int, op: Any) -> tuple[Any, ...] | None:
    if not 0 <= dst < group.size():
        return None  # the long path raises its error
    buf = as_buffer(tensor, writable=dst == group.rank())
    kernel = make_kernel(as_reduce_op(op), buf.flat.dtype, buf.dtype_name)
    algorithm, fp = choose(group, "reduce", buf.nbytes, buf, root=dst)
    compiled = None
    if algorithm.run is shm_rooted.reduce and kernel.ufunc is not None:
        compiled = one_round.compile_call(
            group,
            "reduce",
            fp,
            buf.nbytes,
            shm_rooted.reduce_round(
                group.rank(), group.size(), dst, buf.count, buf.flat.dtype, kernel.ufunc, finalizer(kernel)
            ),
        )
    return shared_plan(algorithm, fp, kernel, compiled)


def gather(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    """On the root a plain list of writeable arrays, elsewhere None or []."""
    tensor, tensors, dst = args
    if type(tensor) is not _NDARRAY:
        tensor = plain_view(tensor)
    engine = group.engine
    if engine.direct is not None:
        return engine.direct.gather(tensor, list_views(tensors), dst)  # type: ignore[no-any-return]
    if not (engine.plannable and type(dst) is int and plain_array(tensor, False)):
        return False
    if dst == group.rank():
        tensors = list_views(tensors)
        flats = scan_like(tensors, group.size(), tensor, True)
        if flats is None:
            return False
    elif tensors is None or (type(tensors) is list and not tensors):
        flats = None
    else:
        return False  # the long path explains what a non-root's list is doing there
    key = ("gather", dst, tensor.dtype, tensor.size)
    try:
        plan = group.plans[key]
    except (KeyError, TypeError):
        plan = cached_plan(group, key, _plan_gather, tensor, tensors, dst)
    if plan is None:
        return False
    flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
    compiled = plan[2]
    if compiled is None or not compiled(flat, flats):
        group.planner.run_planned("gather", plan[0], plan[1], (flat, flats, dst), (tensor,))
    return True


def scatter(group: ProcessGroup, args: tuple[Any, ...]) -> bool:
    """As gather's, the tensor written everywhere and the list read on the root (its flags
    written out, as broadcast's: the root's path to its posted pieces is the others' wait)."""
    tensor, tensors, src = args
    if type(tensor) is not _NDARRAY:
        tensor = plain_view(tensor)
    engine = group.engine
    if engine.direct is not None:
        return engine.direct.scatter(tensor, list_views(tensors), src)  # type: ignore[no-any-return]
    if not (engine.plannable and type(src) is int and type(tensor) is _NDARRAY):
        return False
    flags = tensor.flags
    if not (flags.c_contiguous and flags.writeable):
        return False
    if src == group.rank():
        tensors = list_views(tensors)
        flats = scan_like(tensors, group.size(), tensor, False)
        if flats is None:
            return False
    elif tensors is None or (type(tensors) is list and not tensors):
        flats = None
    else:
        return False  # the long path explains what a non-root's list is doing there
    key = ("scatter", src, tensor.dtype, tensor.size)
    try:
        plan = group.plans[key]
    except (KeyError, TypeError):
        plan = cached_plan(group, key, _plan_scatter, tensor, tensors, src)
    if plan is None:
        return False
    flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
    compiled = plan[2]
    if compiled is None or not compiled(flat, flats):
        group.planner.run_planned(
            "scatter", plan[0], plan[1], (flat, flats, src), (tensors,) if flats is not None else ()
        )
    return True


def _plan_gather(
    group: ProcessGroup, tensor: np.ndarray, gather_list: Any, dst: int
) -> tuple[Any, ...] | None:
    if not 0 <= dst < group.size():
        return None
    inp = as_buffer(tensor, writable=False)
    root_list(group.rank(), group.size(), gather_list, dst, "gather_list", "dst", inp, writable=True)
    algorithm, fp = choose(group, "gather", inp.nbytes, inp, root=dst)
    compiled = None
    if algorithm.run is shm_rooted.gather:
        compiled = one_round.compile_call(
            group,
            "gather",
            fp,
            inp.nbytes,
            shm_rooted.gather_round(group.rank(), group.size(), dst, inp.count, inp.flat.dtype),
        )
    return shared_plan(algorithm, fp, compiled)


def _plan_scatter(
    group: ProcessGroup, tensor: np.ndarray, scatter_list: Any, src: int
) -> tuple[Any, ...] | None:
    if not 0 <= src < group.size():
        return None
    out = as_buffer(tensor, writable=True)
    root_list(group.rank(), group.size(), scatter_list, src, "scatter_list", "src", out, writable=False)
    algorithm, fp = choose(group, "scatter", out.nbytes, out, root=src)
    compiled = None
    slots = group.planner.call_slots
    if algorithm.run is shm_rooted.scatter and slots is not None:
        n, dtype = group.size(), out.flat.dtype
        region = shm_rooted.scatter_region(slots.slot_bytes, n, dtype.itemsize)
        if 0 < out.count <= region:
            compiled = one_round.compile_call(
                group,
                "scatter",
                fp,
                n * region * dtype.itemsize,
                shm_rooted.scatter_round(group.rank(), n, src, out.count, dtype, region),
            )
    return shared_plan(algorithm, fp, compiled)
