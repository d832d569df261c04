"""accord's group behind torch.distributed's ``ProcessGroup``: what torch calls, done by accord.

Owns: ``AccordProcessGroup``, a Python subclass of torch's ProcessGroup (torch's trampoline
sends the C++ callers — DDP's reducer, ``_broadcast_coalesced``, functional collectives — to
these methods too), translating torch's calling convention (tensor lists, ``*Options`` with
group ranks, ``asyncOp``, torch's ReduceOp) into accord's group operations. A blocking call
(``asyncOp`` False, as ``dist.all_reduce(t)`` sends) runs in the caller's thread and returns
a finished Work; an async one is queued on the group's worker in call order (whoever waits
for it first may run it) and returns at once. Tensors are checked here, before anything is
sent, on the rank that made the call; then each call takes the API's pipeline from the group on
(``api.pipeline.run``, with the API's rows: the same DETAIL check, short path, general
path and error accounting as ``accord.all_reduce``). Must not know about the launcher or the
store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions as _AllgatherOptions  # (not in dist)

from ...api import collectives as api
from ...api import p2p as api_p2p
from ...api.pipeline import Call, run
from ...diagnostics import debug
from ...group import collective_ops
from ...group.process_group import ProcessGroup as AccordGroup
from ...group.work import Work as AccordWork
from . import sparse
from .exchanges import ExchangeCalls
from .rooted import GENERAL, RootedCalls
from .tensors import ArgumentError, as_array, check_tensors, fast_op, one_tensor_error, plain_array, reduce_op
from .work import QueuedTorchWork, TorchWork, completed

BACKEND_NAME = "accord"
_ALLREDUCE_OPTIONS, _BROADCAST_OPTIONS = dist.AllreduceOptions, dist.BroadcastOptions
_REDUCE_SCATTER_OPTIONS = dist.ReduceScatterOptions
#: A sparse all_reduce: the DETAIL check compares its name only
_SPARSE_ALL_REDUCE = Call("all_reduce", sparse.all_reduce, detail=())


class AccordProcessGroup(RootedCalls, ExchangeCalls, dist.ProcessGroup):  # type: ignore[misc]  # (torch's overloads)
    """A torch ProcessGroup whose every operation runs on an accord group."""

    def __init__(
        self, group: AccordGroup, on_shutdown: Callable[[AccordProcessGroup], None] | None = None
    ) -> None:
        super().__init__(group.rank(), group.size())  # type: ignore[call-arg]  # (torch's Python subclass form)
        self.accord_group = group
        self._name = group.group_name
        self._desc = group.group_desc
        self._on_shutdown = on_shutdown

    def __repr__(self) -> str:
        return f"<accord torch ProcessGroup {self._name!r} rank {self.rank()}/{self.size()}>"

    # -- identity (torch's C++ accessors reach these through the trampoline) ----------------
    def getBackendName(self) -> str:  # noqa: N802 — torch's name
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    def getGroupName(self) -> str:  # noqa: N802
        return self._name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._desc = desc

    @property
    def group_name(self) -> str:
        return self._name

    @property
    def group_desc(self) -> str:
        return self._desc

    @property
    def _device_types(self) -> list[torch.device]:
        return [torch.device("cpu")]

    def set_timeout(self, timeout: timedelta) -> None:
        self.accord_group.set_timeout(timeout)

    # -- running -----------------------------------------------------------------------------
    def _run(self, call: Call, opts: Any, outputs: list[Any], *args: Any) -> TorchWork:
        """Run ``call`` (an API row) with ``args`` through the pipeline on this group. Roots
        and peers are group ranks: passed as ``group_src``/``group_dst`` (after a None)."""
        work = run(call, self.accord_group, bool(getattr(opts, "asyncOp", True)), *args)
        return completed(call.name, outputs) if work is None else TorchWork(call.name, outputs, work)

    def _run_each(
        self, name: str, opts: Any, outputs: list[Any], calls: Sequence[Callable[[bool], AccordWork | None]]
    ) -> TorchWork:
        """Several operations as one Work (the coalesced forms), in order."""
        async_op = bool(getattr(opts, "asyncOp", True))
        works = [w for w in (call(async_op) for call in calls) if w is not None]
        return TorchWork(name, outputs, AccordWork.joined(name, outputs, works) if works else None)

    def _exchange(self, output: Any, input: Any, async_op: bool, short: Any, queued: Any, *op: Any) -> Any:  # noqa: A002
        """The fast path of a tensor exchange on plain tensors (all_gather_into_tensor,
        reduce_scatter_tensor): blocking, ``short(group, (out, in, *op))`` alone; async, the
        call ``queued`` as one QueuedTorchWork (``_fast``). ``GENERAL``: the general path."""
        out, inp = plain_array(output), plain_array(input)
        if out is None or inp is None:
            return GENERAL
        return self._blocking_or_queued(async_op, short, queued, (out, inp, *op), (output, input))

    # -- all_reduce ----------------------------------------------------------------------------
    def allreduce(self, tensors: Any, opts: Any = None) -> dist.Work | None:
        if type(opts) is _ALLREDUCE_OPTIONS and not debug.DETAIL_ON and len(tensors) == 1:
            array = plain_array(tensors[0])  # the fast paths (dist.all_reduce(t), functional)
            if array is not None and (op := fast_op(opts.reduceOp)) is not None:
                group = self.accord_group
                try:
                    if not opts.asyncOp:
                        collective_ops.all_reduce_flat(group, array, op)
                        return _finished(tensors)
                    queued: QueuedTorchWork | None = collective_ops.all_reduce_queued(
                        group, array, op, tensors, QueuedTorchWork
                    )
                    if queued is not None:
                        return queued
                except BaseException:  # (as api.pipeline.run counts it)
                    group.calls_raised += 1
                    raise
        if isinstance(tensors, torch.Tensor):  # allreduce(tensor, op) overload
            tensors, opts = [tensors], _options(dist.AllreduceOptions, opts)
        opts = opts if opts is not None else dist.AllreduceOptions()
        check_tensors(tensors, "allreduce", sparse_ok=True)
        if len(tensors) != 1:
            raise one_tensor_error("allreduce", tensors)
        tensor = tensors[0]
        reduction = reduce_op(opts.reduceOp, tensor, "allreduce")
        if tensor.layout == torch.sparse_coo:
            return self._run(_SPARSE_ALL_REDUCE, opts, tensors, tensor, reduction)
        return self._run(api.ALL_REDUCE, opts, tensors, as_array(tensor), reduction)

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> TorchWork:
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        check_tensors(tensors, "allreduce_coalesced")
        group = self.accord_group
        ops = [reduce_op(opts.reduceOp, t, "allreduce_coalesced") for t in tensors]
        arrays = [as_array(t) for t in tensors]
        return self._run_each(
            "allreduce_coalesced",
            opts,
            list(tensors),
            [partial(collective_ops.all_reduce, group, x, op) for x, op in zip(arrays, ops)],
        )

    # -- rooted ------------------------------------------------------------------------------
    def broadcast(self, tensors: Any, opts: Any = None) -> dist.Work | None:
        if type(opts) is _BROADCAST_OPTIONS and not debug.DETAIL_ON and len(tensors) == 1:
            array = plain_array(tensors[0])  # the fast paths (dist.broadcast(t, src))
            if array is not None:
                group = self.accord_group
                try:
                    if not opts.asyncOp:
                        collective_ops.broadcast_flat(group, array, opts.rootRank)
                        return _finished(tensors)
                    queued: QueuedTorchWork | None = collective_ops.broadcast_queued(
                        group, array, opts.rootRank, tensors, QueuedTorchWork
                    )
                    if queued is not None:
                        return queued
                except BaseException:  # (as api.pipeline.run counts it)
                    group.calls_raised += 1
                    raise
        if isinstance(tensors, torch.Tensor):  # broadcast(tensor, root) overload
            tensors, root = [tensors], int(opts or 0)
            opts = dist.BroadcastOptions()
            opts.rootRank = root
        opts = opts if opts is not None else dist.BroadcastOptions()
        check_tensors(tensors, "broadcast")
        if len(tensors) != 1:
            raise one_tensor_error("broadcast", tensors)
        return self._run(api.BROADCAST, opts, tensors, as_array(tensors[0]), None, int(opts.rootRank))

    # -- gathers -----------------------------------------------------------------------------
    def allgather_coalesced(self, output_lists: Any, input_list: Any, opts: Any = None) -> TorchWork:
        opts = opts if opts is not None else _AllgatherOptions()
        check_tensors(input_list, "allgather_coalesced")
        group = self.accord_group
        if len(output_lists) != group.size() or any(len(o) != len(input_list) for o in output_lists):
            raise ArgumentError(
                f"allgather_coalesced: output_tensor_lists must hold one list per "
                f"rank ({group.size()}), each with one tensor per input "
                f"({len(input_list)})"
            )
        # output_tensor_lists[rank][k] receives that rank's input k: one all_gather per input
        per_input = [[outputs[k] for outputs in output_lists] for k in range(len(input_list))]
        return self._run_each(
            "allgather_coalesced",
            opts,
            list(output_lists),
            [partial(collective_ops.all_gather, group, outs, t) for outs, t in zip(per_input, input_list)],
        )

    def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> dist.Work | None:  # noqa: A002
        if type(opts) is _AllgatherOptions and not debug.DETAIL_ON:  # the fast paths
            work = self._exchange(
                output,
                input,
                opts.asyncOp,
                collective_ops.all_gather_into_tensor_short,
                collective_ops.all_gather_into_tensor_queued,
            )
            if work is not GENERAL:
                return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else _AllgatherOptions()
        check_tensors([output, input], "all_gather_into_tensor")
        return self._run(api.ALL_GATHER_INTO_TENSOR, opts, [output], output, input)

    _allgather_base = all_gather_single  # type: ignore[assignment]

    def all_gather_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        if len(outputs) == 1 and len(inputs) == 1:  # (the functional all_gather_into_tensor's)
            work = self.all_gather_single(outputs[0], inputs[0], opts)
            return work if work is not None else completed("all_gather_into_tensor_coalesced", [outputs[0]])
        opts = opts if opts is not None else _AllgatherOptions()
        check_tensors(list(outputs) + list(inputs), "all_gather_into_tensor_coalesced")
        group = self.accord_group
        return self._run_each(
            "all_gather_into_tensor_coalesced",
            opts,
            list(outputs),
            [partial(collective_ops.all_gather_into_tensor, group, o, i) for o, i in zip(outputs, inputs)],
        )

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # type: ignore[assignment]

    # -- reduce_scatter ----------------------------------------------------------------------
    def reduce_scatter_single(self, output: Any, input: Any, opts: Any = None) -> dist.Work | None:  # noqa: A002
        if type(opts) is _REDUCE_SCATTER_OPTIONS and not debug.DETAIL_ON:  # the fast paths
            op = fast_op(opts.reduceOp)
            if op is not None:
                work = self._exchange(
                    output,
                    input,
                    opts.asyncOp,
                    collective_ops.reduce_scatter_tensor_short,
                    collective_ops.reduce_scatter_tensor_queued,
                    op,
                )
                if work is not GENERAL:
                    return work  # type: ignore[no-any-return]
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        check_tensors([output, input], "reduce_scatter_tensor")
        reduction = reduce_op(opts.reduceOp, output, "reduce_scatter_tensor")
        return self._run(api.REDUCE_SCATTER_TENSOR, opts, [output], output, input, reduction)

    _reduce_scatter_base = reduce_scatter_single  # type: ignore[assignment]

    def reduce_scatter_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        if len(outputs) == 1 and len(inputs) == 1:  # (the functional reduce_scatter_tensor's)
            work = self.reduce_scatter_single(outputs[0], inputs[0], opts)
            return work if work is not None else completed("reduce_scatter_tensor_coalesced", [outputs[0]])
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        check_tensors(list(outputs) + list(inputs), "reduce_scatter_tensor_coalesced")
        group = self.accord_group
        ops = [reduce_op(opts.reduceOp, o, "reduce_scatter_tensor_coalesced") for o in outputs]
        return self._run_each(
            "reduce_scatter_tensor_coalesced",
            opts,
            list(outputs),
            [
                partial(collective_ops.reduce_scatter_tensor, group, o, i, op)
                for o, i, op in zip(outputs, inputs, ops)
            ],
        )

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # type: ignore[assignment]

    # -- barriers ------------------------------------------------------------------------------
    def barrier(self, opts: Any = None) -> TorchWork | None:
        opts = opts if opts is not None else dist.BarrierOptions()
        if not opts.asyncOp and opts.timeout.total_seconds() <= 0 and not debug.DETAIL_ON:
            collective_ops.barrier(self.accord_group, False)  # the blocking fast path
            return _finished([])
        return self._run(api.BARRIER, opts, [], _seconds(getattr(opts, "timeout", None)))

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        run(api.MONITORED_BARRIER, self.accord_group, False, _seconds(timeout), wait_all_ranks)

    # -- point to point (posted at once, never queued behind collectives) ------------------
    def send(self, tensors: Any, dst: int, tag: int = 0) -> TorchWork:
        check_tensors(tensors, "send")
        work = run(api_p2p.ISEND, self.accord_group, False, as_array(tensors[0]), None, int(dst), int(tag))
        return TorchWork("send", list(tensors), work)

    def recv(self, tensors: Any, src: int, tag: int = 0) -> TorchWork:
        check_tensors(tensors, "recv")
        work = run(api_p2p.IRECV, self.accord_group, False, as_array(tensors[0]), None, int(src), int(tag))
        return TorchWork("recv", list(tensors), work)

    def recv_anysource(self, tensors: Any, tag: int = 0) -> TorchWork:
        check_tensors(tensors, "recv")
        work = run(api_p2p.IRECV, self.accord_group, False, as_array(tensors[0]), None, None, int(tag))
        return TorchWork("recv", list(tensors), work)

    # -- lifetime ------------------------------------------------------------------------------
    def abort(self) -> None:
        self.accord_group.abort()

    def shutdown(self) -> None:
        if self._on_shutdown is not None:
            callback, self._on_shutdown = self._on_shutdown, None
            callback(self)

    def _wait_for_pending_works(self) -> None:
        """Nothing to do: accord's work finishes or fails on its own deadline."""

    def _set_sequence_number_for_group(self) -> None:
        """Call numbers start at 1 on every group already."""

    def _get_sequence_number_for_group(self) -> int:
        return self.accord_group.last_seq


def _finished(outputs: list[Any]) -> TorchWork | None:
    """What a blocking fast path returns: no Work. Only torch's own API asks for a blocking
    call (``asyncOp`` False; torch's options default to True), and it waits only for a Work
    it gets ("the backend has sync'ed at CPP level", as ProcessGroupNCCL's may): the call
    finished here, so there is nothing to wait for, and no ``wait()`` to cross back for."""
    return None


def _options(cls: Any, op: Any) -> Any:
    opts = cls()
    if op is not None:
        opts.reduceOp = op
    return opts


def _seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return seconds if seconds > 0 else None
