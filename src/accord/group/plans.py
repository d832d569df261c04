"""What every short path is made of: the plan cache, the shared choice, the argument scans.

Owns: the plan cache (``cached_plan``: per call signature, the fingerprint and algorithm,
made once through the same checks and choices as the long path; at most ``MAX_PLANS`` per
group), ``choose`` (algorithm and fingerprint, shared with ``dispatch.launch`` so a rank
on either path agrees with a rank on the other), ``shared_plan``, the scans that tell a plain
argument from one the long path must take (``plain_array``, ``scan_list``, ``scan_like``, ``list_views``,
``flat_view``), running a plan (``run_plan``, ``finalizer``) and queueing a short path's
call (``defer_run``). The short paths themselves are ``short_paths``' (all_reduce,
broadcast, barrier, reduce, gather, scatter), ``short_exchanges``' (all_gather,
reduce_scatter) and ``short_all_to_all``'s: this module was split from ``short_paths`` so
that they all build on it and each stays under 400 lines. Must not know about
the default world or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arrays import Buffer, plain_view
from ..collectives.registry import Algorithm
from ..reduce_ops import Kernel
from ..transport.wire import Fingerprint
from .hierarchy import HIERARCHICAL
from .process_group import ProcessGroup

_NDARRAY = np.ndarray
#: The most call signatures a group keeps plans of (a plan with its compiled form holds views
#: of every rank's slots and a few closures: a few KiB).
MAX_PLANS = 512


def choose(
    group: ProcessGroup,
    collective: str,
    nbytes: int,
    fp_buf: Buffer | None,
    root: int = -1,
    count: int | None = None,
) -> tuple[Algorithm, Fingerprint]:
    """The algorithm for ``nbytes`` on this group, and the call's fingerprint."""
    algorithm = group.engine.choose_algorithm(collective, nbytes)
    fp = group.fingerprint(collective, algorithm, fp_buf, root)
    if count is not None:
        fp = fp._replace(count=count)
    return algorithm, fp


def cached_plan(
    group: ProcessGroup, key: tuple[Any, ...], make: Callable[..., tuple[Any, ...] | None], *args: Any
) -> tuple[Any, ...] | None:
    """The cached plan of a call signature on a group (None: take the long path).

    A plan is (fingerprint, algorithm, extra…), made once by ``make(group, *args)`` through the
    same checks and choices as the long path (a check that fails raises its error here, as the
    long path would, and nothing is cached).
    """
    try:
        return group.plans[key]
    except KeyError:
        if len(group.plans) >= MAX_PLANS:  # a program of ever-new shapes: start again
            group.plans.clear()
        plan = group.plans[key] = make(group, *args)
        return plan
    except TypeError:  # an unhashable argument: the long path explains what is wrong with it
        return None


def shared_plan(algorithm: Algorithm, fp: Fingerprint, *extra: Any) -> tuple[Any, ...] | None:
    return None if algorithm.kind == HIERARCHICAL else (fp, algorithm, *extra)


def plain_array(array: Any, writes: bool) -> bool:
    if type(array) is not _NDARRAY:
        return False
    flags = array.flags
    return flags.c_contiguous and (flags.writeable or not writes)


def scan_list(arrays: Any, size: int, writes: bool) -> tuple[tuple[Any, ...], list[np.ndarray]] | None:
    """One pass over a list argument: None unless it is a list (or tuple) of ``size`` plain
    arrays; else its signature (dtype, size of each) and the arrays as 1-D views."""
    if (type(arrays) is not list and type(arrays) is not tuple) or len(arrays) != size:
        return None
    signature: list[Any] = []
    flats = []
    for array in arrays:
        if type(array) is not _NDARRAY:
            return None
        flags = array.flags
        if not flags.c_contiguous or (writes and not flags.writeable):
            return None
        signature += (array.dtype, array.size)
        flats.append(array if array.ndim == 1 else array.reshape(-1))
    return tuple(signature), flats


def scan_like(arrays: Any, size: int, like: np.ndarray, writes: bool) -> Sequence[np.ndarray] | None:
    """``scan_list`` for a list whose every array must have ``like``'s dtype and size (a
    rooted call's list: gather's, scatter's): the arrays as 1-D views (the list itself when
    they are 1-D already: read, never kept), or None (not such a list; the long path says
    what is wrong). Nothing to put in a plan's key: the list adds no shape of its own."""
    if (type(arrays) is not list and type(arrays) is not tuple) or len(arrays) != size:
        return None
    dtype, count = like.dtype, like.size
    for array in arrays:  # the usual list: 1-D arrays sharing ``like``'s dtype object, as is
        if type(array) is not _NDARRAY or array.ndim != 1 or array.size != count or array.dtype is not dtype:
            return _scan_like_rest(arrays, dtype, count, writes)
        flags = array.flags
        if not flags.c_contiguous or (writes and not flags.writeable):
            return None
    return arrays


def _scan_like_rest(arrays: Any, dtype: np.dtype, count: int, writes: bool) -> list[np.ndarray] | None:
    """``scan_like``'s every other case: arrays of other shapes (as 1-D views), an equal
    dtype that is another object."""
    flats = []
    for array in arrays:
        if type(array) is not _NDARRAY or array.size != count:
            return None
        kind = array.dtype
        if kind is not dtype and kind != dtype:
            return None
        flags = array.flags
        if not flags.c_contiguous or (writes and not flags.writeable):
            return None
        flats.append(array if array.ndim == 1 else array.reshape(-1))
    return flats


def list_views(arrays: Any) -> Any:
    """A list argument with plain torch tensors seen as NumPy arrays (``plain_view``), when
    its first element is not already an array; else as it is (None included)."""
    if (type(arrays) is list or type(arrays) is tuple) and arrays and type(arrays[0]) is not _NDARRAY:
        return [plain_view(a) for a in arrays]
    return arrays


def flat_view(array: np.ndarray) -> np.ndarray:
    return array if array.ndim == 1 else array.reshape(-1)


def finalizer(kernel: Kernel) -> Callable[[np.ndarray, int], None] | None:
    return kernel.finalize if kernel.needs_finalize else None


def run_plan(
    group: ProcessGroup,
    op: str,
    plan: tuple[Any, ...],
    args: tuple[Any, ...],
    compiled_args: tuple[Any, ...],
    inputs: tuple[Any, ...],
) -> None:
    """Run a planned call: its compiled form if it has one and it can run now, else
    run_planned with ``args`` (the schedule's)."""
    compiled = plan[-1]
    if compiled is None or not compiled(*compiled_args):
        group.planner.run_planned(op, plan[0], plan[1], args, inputs)


def defer_run(
    group: ProcessGroup, op: str, run: Callable[[], None], result: list[Any], held: Any, make: Any
) -> Any:
    """Queue a short path's ``run`` as an async call (``Planner.defer``) whose Work gives
    ``result`` and holds ``held`` (the caller's tensors: a view of a plain tensor does not
    keep it alive) until it ran; ``make``: the Work's class."""

    def queued(_held: Any = held) -> list[Any]:  # (the default holds ``held``)
        run()
        return result

    return group.planner.defer(op, queued, result, (held,), make)
