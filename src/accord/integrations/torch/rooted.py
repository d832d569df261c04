"""The rooted calls of accord's torch backend: reduce, gather and scatter.

Owns: ``RootedCalls``, a mixin of ``backend.AccordProcessGroup`` (which provides
``accord_group`` and ``_run``): torch's calling convention for the three calls, and the
blocking fast path of each on plain tensors (reduce's with a plain ReduceOp) — straight to
the short path, as broadcast's (no argument re-checks, no pipeline, no Work), the general
path taking whatever
the short path refuses, and explaining it. Split from ``backend``, which was near 500 lines
(all_reduce's and broadcast's fast paths stay there, a frame shorter). Must not know about
the launcher or the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ...api import collectives as api
from ...diagnostics import debug
from ...group import collective_ops
from ...group.process_group import ProcessGroup as AccordGroup
from .tensors import (
    ArgumentError,
    as_array,
    check_tensors,
    fast_op,
    one_tensor_error,
    plain_array,
    reduce_op,
)
from .work import TorchWork

_SCATTER_OPTIONS, _GATHER_OPTIONS, _REDUCE_OPTIONS = (
    dist.ScatterOptions,
    dist.GatherOptions,
    dist.ReduceOptions,
)
#: What a fast path returns when the general path must take the call
GENERAL = object()


class RootedCalls:
    """reduce, gather and scatter of ``AccordProcessGroup`` (see the module docstring), and
    ``_fast``, which every fast path of the backend but all_reduce's and broadcast's runs
    its call through."""

    accord_group: AccordGroup
    _run: Callable[..., TorchWork]

    def _fast(self, short: Any, args: tuple[Any, ...], queued: Any = None) -> Any:
        """A fast path's call on arrays the caller vouches for: blocking, ``short(group,
        args)`` alone (None: it finished here, no Work); given ``queued``, the async call
        ``queued(group, *args)`` (its Work). ``GENERAL``: take the general path, also for a
        refused argument (found on the flat views: the general path says it with the
        tensors' shapes). An error that leaves the call counts in ``calls_raised``, as
        ``api.pipeline.run`` counts it."""
        group = self.accord_group
        try:
            if queued is None:
                if short(group, args):
                    return None
            else:
                work = queued(group, *args)
                if work is not None:
                    return work
        except ArgumentError:
            pass
        except BaseException:
            group.calls_raised += 1
            raise
        return GENERAL

    def _rooted(self, kind: Any, opts: Any, one: Any, lists: Any, short: Any) -> Any:
        """The blocking fast path of scatter (``one``: the output, ``lists``: the inputs)
        and gather (the other way round) on plain tensors, options of type ``kind``: the
        list on the root, elsewhere none. ``GENERAL``: take the general path."""
        if type(opts) is not kind or opts.asyncOp or debug.DETAIL_ON or len(one) != 1 or len(lists) > 1:
            return GENERAL
        array = plain_array(one[0])
        if array is None:
            return GENERAL
        arrays = None
        if lists:
            arrays = [plain_array(t) for t in lists[0]]
            if any(a is None for a in arrays):
                return GENERAL
        return self._fast(short, (array, arrays, int(opts.rootRank)))

    def reduce(self, tensors: Any, opts: Any = None) -> TorchWork | None:
        if type(opts) is _REDUCE_OPTIONS and not opts.asyncOp and not debug.DETAIL_ON and len(tensors) == 1:
            array = plain_array(tensors[0])  # the blocking fast path (dist.reduce(t, dst))
            if array is not None and (fast := fast_op(opts.reduceOp)) is not None:
                work = self._fast(collective_ops.reduce_short, (array, int(opts.rootRank), fast))
                if work is not GENERAL:
                    return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.ReduceOptions()
        check_tensors(tensors, "reduce")
        if len(tensors) != 1:
            raise one_tensor_error("reduce", tensors)
        op, dst = reduce_op(opts.reduceOp, tensors[0], "reduce"), int(opts.rootRank)
        return self._run(api.REDUCE, opts, tensors, as_array(tensors[0]), None, dst, op)

    def gather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        work = self._rooted(_GATHER_OPTIONS, opts, input_tensors, output_tensors, collective_ops.gather_short)
        if work is not GENERAL:
            return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.GatherOptions()
        return self._general(api.GATHER, opts, input_tensors, output_tensors, lambda outs: list(outs or []))

    def scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        short = collective_ops.scatter_short
        work = self._rooted(_SCATTER_OPTIONS, opts, output_tensors, input_tensors, short)
        if work is not GENERAL:
            return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.ScatterOptions()
        outputs = list(output_tensors)
        return self._general(api.SCATTER, opts, output_tensors, input_tensors, lambda ins: outputs)

    def _general(
        self, call: Any, opts: Any, one: Any, lists: Any, outputs: Callable[[Any], list[Any]]
    ) -> TorchWork:
        """gather's or scatter's general path: ``one`` (the tensor every rank passes) and the
        root's list (``lists[0]``, elsewhere none) checked, the call run on the group; the
        Work's result is ``outputs(the list)``."""
        check_tensors(one, call.name)
        tensors = lists[0] if lists else None
        if tensors is not None:
            check_tensors(tensors, call.name)
        return self._run(call, opts, outputs(tensors), one[0], tensors, None, int(opts.rootRank))
