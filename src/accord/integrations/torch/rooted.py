"""The rooted calls of accord's torch backend: reduce, gather and scatter.

Owns: ``RootedCalls``, a mixin of ``backend.AccordProcessGroup`` (which provides
``accord_group`` and ``_run``): torch's calling convention for the three calls, and the
blocking fast path of scatter and gather on plain tensors — straight to the short path, as
broadcast's (no argument re-checks, no pipeline, no Work), the general path taking whatever
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
from .tensors import ArgumentError, as_array, check_tensors, one_tensor_error, plain_array, reduce_op
from .work import TorchWork

_SCATTER_OPTIONS, _GATHER_OPTIONS = dist.ScatterOptions, dist.GatherOptions
#: What ``_rooted`` returns when the general path must take the call
_GENERAL = object()


class RootedCalls:
    """reduce, gather and scatter of ``AccordProcessGroup`` (see the module docstring)."""

    accord_group: AccordGroup
    _run: Callable[..., TorchWork]

    def _rooted(self, short: Any, tensor: Any, tensors: Any, root: int) -> Any:
        """The blocking fast path of scatter and gather on plain tensors (``tensors``: the
        root's list, elsewhere None): ``short(group, (array, arrays, root))`` alone; None
        (no Work: the call finished here). ``_GENERAL``: take the general path (also for a
        refused argument: it says it with the tensors' shapes)."""
        array = plain_array(tensor)
        if array is None:
            return _GENERAL
        arrays = None
        if tensors is not None:
            arrays = [plain_array(t) for t in tensors]
            if any(a is None for a in arrays):
                return _GENERAL
        group = self.accord_group
        try:
            if short(group, (array, arrays, root)):
                return None
        except ArgumentError:
            pass
        except BaseException:  # (as api.pipeline.run counts it)
            group.calls_raised += 1
            raise
        return _GENERAL

    def reduce(self, tensors: Any, opts: Any = None) -> TorchWork:
        opts = opts if opts is not None else dist.ReduceOptions()
        check_tensors(tensors, "reduce")
        if len(tensors) != 1:
            raise one_tensor_error("reduce", tensors)
        op, dst = reduce_op(opts.reduceOp, tensors[0], "reduce"), int(opts.rootRank)
        return self._run(api.REDUCE, opts, tensors, as_array(tensors[0]), None, dst, op)

    def gather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        if (
            type(opts) is _GATHER_OPTIONS
            and not opts.asyncOp
            and not debug.DETAIL_ON
            and len(input_tensors) == 1
            and len(output_tensors) <= 1
        ):
            outs = output_tensors[0] if output_tensors else None
            work = self._rooted(collective_ops.gather_short, input_tensors[0], outs, int(opts.rootRank))
            if work is not _GENERAL:
                return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.GatherOptions()
        check_tensors(input_tensors, "gather")
        dst = int(opts.rootRank)
        outs = output_tensors[0] if output_tensors else None
        if outs is not None:
            check_tensors(outs, "gather")
        return self._run(api.GATHER, opts, list(outs or []), input_tensors[0], outs, None, dst)

    def scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        if (
            type(opts) is _SCATTER_OPTIONS
            and not opts.asyncOp
            and not debug.DETAIL_ON
            and len(output_tensors) == 1
            and len(input_tensors) <= 1
        ):
            ins = input_tensors[0] if input_tensors else None
            work = self._rooted(collective_ops.scatter_short, output_tensors[0], ins, int(opts.rootRank))
            if work is not _GENERAL:
                return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.ScatterOptions()
        check_tensors(output_tensors, "scatter")
        src = int(opts.rootRank)
        ins = input_tensors[0] if input_tensors else None
        if ins is not None:
            check_tensors(ins, "scatter")
        return self._run(api.SCATTER, opts, list(output_tensors), output_tensors[0], ins, None, src)
