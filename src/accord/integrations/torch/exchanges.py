"""The list forms of accord's torch backend: all_gather and reduce_scatter over a list of
tensors, and all_to_all in both forms.

Owns: ``ExchangeCalls``, a mixin of ``backend.AccordProcessGroup`` (which provides
``accord_group``, ``_run`` and, from ``rooted.RootedCalls``, ``_fast``): torch's calling
convention for ``dist.all_gather(tensor_list, tensor)``, ``dist.reduce_scatter(output,
input_list)``, ``dist.all_to_all_single`` and ``dist.all_to_all``, and the blocking fast
path of each on plain tensors — straight to the short path, as scatter's and gather's (no
argument re-checks, no pipeline, no Work), and their async forms (torch's functional
``all_to_all_single`` among them) queued as their short paths: the general path takes
whatever the short path refuses (a tensor that is not plain, split sizes given as a
tensor, a refused argument, a DETAIL check), and explains it. Split from ``backend``,
which is near 400 lines. Must not know about the launcher or the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions as _AllgatherOptions  # (not in dist)

from ...api import collectives as api
from ...diagnostics import debug
from ...group import collective_ops
from ...group.process_group import ProcessGroup as AccordGroup
from .rooted import GENERAL
from .tensors import check_tensors, fast_op, one_tensor_error, plain_array, reduce_op
from .work import QueuedTorchWork, TorchWork

_REDUCE_SCATTER_OPTIONS, _ALL_TO_ALL_OPTIONS = dist.ReduceScatterOptions, dist.AllToAllOptions


def _plain_arrays(tensors: Any) -> list[Any] | None:
    """A list of tensors as NumPy views (``plain_array``), or None if one is not plain."""
    arrays = [plain_array(t) for t in tensors]
    return None if any(a is None for a in arrays) else arrays


def _fast_form(opts: Any, kind: Any, outputs: Any, inputs: Any) -> bool:
    """Whether a list form may take its fast path (blocking or queued): torch's own options
    of ``kind``, no DETAIL check to run, one output and one input (a list, and a tensor)."""
    return type(opts) is kind and not debug.DETAIL_ON and len(outputs) == 1 and len(inputs) == 1


class ExchangeCalls:
    """The list forms of all_gather and reduce_scatter, and all_to_all, of
    ``AccordProcessGroup`` (see the module docstring)."""

    accord_group: AccordGroup
    _run: Callable[..., TorchWork]
    _fast: Callable[..., Any]

    def _blocking_or_queued(
        self, async_op: bool, short: Any, queued: Any, args: tuple[Any, ...], held: tuple[Any, Any]
    ) -> Any:
        """A fast path's call on views the caller vouches for: blocking, ``short(group,
        args)``; async, ``queued(group, *args, QueuedTorchWork, held)``, the Work holding
        ``held`` (the caller's tensors: the views do not keep them alive). ``GENERAL``: take
        the general path."""
        if not async_op:
            return self._fast(short, args)
        return self._fast(None, (*args, QueuedTorchWork, held), queued)

    def allgather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        if _fast_form(opts, _AllgatherOptions, output_tensors, input_tensors):
            inp, outs = plain_array(input_tensors[0]), _plain_arrays(output_tensors[0])
            if inp is not None and outs is not None:
                held = (output_tensors[0], input_tensors[0])
                short, queued = collective_ops.all_gather_short, collective_ops.all_gather_queued
                work = self._blocking_or_queued(opts.asyncOp, short, queued, (outs, inp), held)
                if work is not GENERAL:
                    return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else _AllgatherOptions()
        check_tensors(input_tensors, "allgather")
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise one_tensor_error("allgather", input_tensors)
        outs, tensor = output_tensors[0], input_tensors[0]
        check_tensors(outs, "allgather")
        return self._run(api.ALL_GATHER, opts, [list(outs)], outs, tensor)

    def reduce_scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        if _fast_form(opts, _REDUCE_SCATTER_OPTIONS, output_tensors, input_tensors):
            out, ins = plain_array(output_tensors[0]), _plain_arrays(input_tensors[0])
            if out is not None and ins is not None and (op := fast_op(opts.reduceOp)) is not None:
                held = (output_tensors[0], input_tensors[0])
                short, queued = collective_ops.reduce_scatter_short, collective_ops.reduce_scatter_queued
                work = self._blocking_or_queued(opts.asyncOp, short, queued, (out, ins, op), held)
                if work is not GENERAL:
                    return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        check_tensors(output_tensors, "reduce_scatter")
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise one_tensor_error("reduce_scatter", output_tensors)
        output, inputs = output_tensors[0], input_tensors[0]
        check_tensors(inputs, "reduce_scatter")
        reduction = reduce_op(opts.reduceOp, output, "reduce_scatter")
        return self._run(api.REDUCE_SCATTER, opts, [output], output, inputs, reduction)

    def all_to_all_single(
        self,
        output: Any,
        input: Any,  # noqa: A002
        output_split_sizes: Any,
        input_split_sizes: Any,
        opts: Any = None,
    ) -> TorchWork | None:
        if type(opts) is _ALL_TO_ALL_OPTIONS and not debug.DETAIL_ON:
            out, inp = plain_array(output), plain_array(input)
            if out is not None and inp is not None:
                if output.dim() != 1 or input.dim() != 1:  # dim 0 is cut: the views in its shape
                    out, inp = out.reshape(output.shape), inp.reshape(input.shape)
                args = (out, inp, output_split_sizes, input_split_sizes)
                short, queued = (
                    collective_ops.all_to_all_single_short,
                    collective_ops.all_to_all_single_queued,
                )
                work = self._blocking_or_queued(opts.asyncOp, short, queued, args, (output, input))
                if work is not GENERAL:
                    return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.AllToAllOptions()
        check_tensors([output, input], "all_to_all_single")
        outs = list(output_split_sizes) or None
        ins = list(input_split_sizes) or None
        return self._run(api.ALL_TO_ALL_SINGLE, opts, [output], output, input, outs, ins)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> TorchWork | None:
        if type(opts) is _ALL_TO_ALL_OPTIONS and not debug.DETAIL_ON:
            outs, ins = _plain_arrays(output_tensors), _plain_arrays(input_tensors)
            if outs is not None and ins is not None:
                short, queued = collective_ops.all_to_all_short, collective_ops.all_to_all_queued
                held = (output_tensors, input_tensors)
                work = self._blocking_or_queued(opts.asyncOp, short, queued, (outs, ins), held)
                if work is not GENERAL:
                    return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.AllToAllOptions()
        check_tensors(list(output_tensors) + list(input_tensors), "alltoall")
        return self._run(api.ALL_TO_ALL, opts, [list(output_tensors)], output_tensors, input_tensors)
