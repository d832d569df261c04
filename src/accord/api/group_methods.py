"""torch's method-level API on accord's groups: ``pg.allreduce([t], opts)``, ``pg.broadcast``,
``pg.allgather``, ``pg.barrier``, ``pg.send``… as library code (Megatron-style, DeepSpeed-style)
calls them on ``torch.distributed.ProcessGroup``.

Owns: ``ProcessGroup``, the class of every group the API hands out (``accord.ProcessGroup``:
the default group, ``new_group``'s, ``split_group``'s, the groups of a shrunk or grown world):
the group layer's ``ProcessGroup`` plus torch's methods, their overloads (``allreduce(tensors,
opts)``, ``allreduce(tensor, op)``, ``broadcast(tensor, root)``…) and return convention (a
``Work`` always: a finished one for a blocking call, ``opts.asyncOp`` False). Roots and peers
are group ranks, as in torch's options.

Why here, and a subclass: every entry point of the API takes the one pipeline (``pipeline.run``:
device routing, the DETAIL check, short paths, error accounting), and the pipeline is the API
layer's, which the group layer must not import. So the methods live in the API layer, and the
groups are of this class: the API makes the default group with it (``worlds.build_world``,
``lifecycle``'s engine worlds), and an engine makes a group's subgroups and twins of the
group's own class, so ``new_group`` hands out this class without the group layer knowing it.
Groups the API never hands out (the hierarchy's inner ones) stay the plain class. Must not
know how a step of the pipeline works, nor torch (its option objects are read by attribute).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentError
from ..group.process_group import ProcessGroup as GroupBase
from ..group.work import Work
from ..reduce_ops import ReduceOp
from . import collectives as rows
from . import p2p as p2p_rows
from .options import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    timeout_seconds,
)
from .pipeline import Call, run


class ProcessGroup(GroupBase):
    """A set of ranks that run collectives together, with torch's method-level API
    (``torch.distributed.ProcessGroup``'s methods; see the module docstring)."""

    # -- running ---------------------------------------------------------------------------
    def _run(self, call: Call, opts: Any, outputs: list[Any], *args: Any) -> Work:
        """``call`` through the pipeline on this group; a Work always (torch's convention)."""
        work = run(call, self, bool(getattr(opts, "asyncOp", True)), *args)
        return Work.completed(call.name, outputs) if work is None else work

    def _run_each(self, name: str, opts: Any, outputs: list[Any], calls: list[tuple[Call, tuple]]) -> Work:
        """Several calls in order, as one Work (the coalesced forms)."""
        async_op = bool(getattr(opts, "asyncOp", True))
        works = [run(call, self, async_op, *args) for call, args in calls]
        return Work.joined(name, outputs, [w for w in works if w is not None])

    def _get_backend_name(self) -> str:
        return self.backend

    # -- all_reduce ------------------------------------------------------------------------
    def allreduce(self, tensors: Any, opts: Any = None, timeout: Any = None) -> Work:
        """``allreduce(tensors, opts)``, ``allreduce(tensors, op, timeout)`` or
        ``allreduce(tensor, op=SUM, timeout)``."""
        tensors, opts = _listed(tensors), _options(AllreduceOptions, opts, "reduceOp", timeout)
        return self._run(rows.ALL_REDUCE, opts, tensors, _one(tensors, "allreduce"), opts.reduceOp)

    def allreduce_coalesced(self, tensors: Sequence[Any], opts: Any = None) -> Work:
        opts = _options(AllreduceCoalescedOptions, opts, "reduceOp")
        calls = [(rows.ALL_REDUCE, (t, opts.reduceOp)) for t in tensors]
        return self._run_each("allreduce_coalesced", opts, list(tensors), calls)

    # -- rooted ----------------------------------------------------------------------------
    def broadcast(self, tensors: Any, opts: Any = None, timeout: Any = None) -> Work:
        """``broadcast(tensors, opts)`` or ``broadcast(tensor, root, timeout)``."""
        tensors, opts = _listed(tensors), _options(BroadcastOptions, opts, "rootRank", timeout)
        tensor = _one(tensors, "broadcast")
        return self._run(rows.BROADCAST, opts, tensors, tensor, None, int(opts.rootRank))

    def reduce(self, tensors: Any, opts: Any = None, op: Any = ReduceOp.SUM, timeout: Any = None) -> Work:
        """``reduce(tensors, opts)`` or ``reduce(tensor, root, op=SUM, timeout)``."""
        tensors = _listed(tensors)
        if not _is_options(opts):
            opts = _options(ReduceOptions, opts, "rootRank", timeout)
            opts.reduceOp = op
        tensor = _one(tensors, "reduce")
        return self._run(rows.REDUCE, opts, tensors, tensor, None, int(opts.rootRank), opts.reduceOp)

    def gather(self, output_tensors: Any, input_tensors: Any, opts: Any = None, timeout: Any = None) -> Work:
        """``gather(output_tensors: [[…]] on the root, [] elsewhere, input_tensors: [t], opts)``
        or ``gather(output_tensors: […], input_tensor, root, timeout)``."""
        if _is_list(input_tensors):
            opts = _options(GatherOptions, opts, "rootRank")
            tensor = _one(input_tensors, "gather")
            outs = list(output_tensors[0]) if output_tensors else None
        else:
            opts, tensor = _options(GatherOptions, opts, "rootRank", timeout), input_tensors
            outs = list(output_tensors) if output_tensors else None
        root = int(opts.rootRank)
        gather_list = outs if root == self.rank() else None
        return self._run(rows.GATHER, opts, list(outs or []), tensor, gather_list, None, root)

    def scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None, timeout: Any = None) -> Work:
        """``scatter(output_tensors: [t], input_tensors: [[…]] on the root, [] elsewhere,
        opts)`` or ``scatter(output_tensor, input_tensors: […], root, timeout)``."""
        if _is_list(output_tensors):
            opts = _options(ScatterOptions, opts, "rootRank")
            tensor = _one(output_tensors, "scatter")
            ins = list(input_tensors[0]) if input_tensors else None
        else:
            opts, tensor = _options(ScatterOptions, opts, "rootRank", timeout), output_tensors
            ins = list(input_tensors) if input_tensors else None
        root = int(opts.rootRank)
        scatter_list = ins if root == self.rank() else None
        return self._run(rows.SCATTER, opts, [tensor], tensor, scatter_list, None, root)

    # -- gathers ---------------------------------------------------------------------------
    def allgather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> Work:
        """``allgather(output_tensors: [[…]], input_tensors: [t], opts)`` or
        ``allgather(output_tensors: […], input_tensor, timeout)``."""
        if _is_list(input_tensors):
            tensor = _one(input_tensors, "allgather")
            outs = list(_one(output_tensors, "allgather"))
            opts = _options(AllgatherOptions, opts, None)
        else:
            tensor, outs = input_tensors, list(output_tensors)
            opts = _options(AllgatherOptions, None, None, opts)
        return self._run(rows.ALL_GATHER, opts, [outs], outs, tensor)

    def allgather_coalesced(self, output_lists: Any, input_list: Any, opts: Any = None) -> Work:
        """``output_lists[r][k]`` receives rank r's ``input_list[k]``: one all_gather per input."""
        opts = _options(AllgatherOptions, opts, None)
        if len(output_lists) != self.size() or any(len(o) != len(input_list) for o in output_lists):
            raise ArgumentError(
                f"allgather_coalesced: output_lists must hold one list per rank ({self.size()}), "
                f"each with one tensor per input ({len(input_list)})"
            )
        calls = [
            (rows.ALL_GATHER, ([outs[k] for outs in output_lists], tensor))
            for k, tensor in enumerate(input_list)
        ]
        return self._run_each("allgather_coalesced", opts, list(output_lists), calls)

    def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Work:  # noqa: A002
        opts = _options(AllgatherOptions, opts, None)
        return self._run(rows.ALL_GATHER_INTO_TENSOR, opts, [output], output, input)

    def allgather_into_tensor_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Work:
        opts = _options(AllgatherOptions, opts, None)
        calls = [(rows.ALL_GATHER_INTO_TENSOR, (o, i)) for o, i in zip(outputs, inputs, strict=True)]
        return self._run_each("allgather_into_tensor_coalesced", opts, list(outputs), calls)

    # -- reduce_scatter --------------------------------------------------------------------
    def reduce_scatter(
        self, output_tensors: Any, input_tensors: Any, opts: Any = None, timeout: Any = None
    ) -> Work:
        """``reduce_scatter(output_tensors: [t], input_tensors: [[…]], opts)`` or
        ``reduce_scatter(output, input: […], op=SUM, timeout)``."""
        if _is_list(output_tensors):
            output = _one(output_tensors, "reduce_scatter")
            inputs = list(_one(input_tensors, "reduce_scatter"))
            opts = _options(ReduceScatterOptions, opts, "reduceOp")
        else:
            output, inputs = output_tensors, list(input_tensors)
            opts = _options(ReduceScatterOptions, opts, "reduceOp", timeout)
        return self._run(rows.REDUCE_SCATTER, opts, [output], output, inputs, opts.reduceOp)

    def _reduce_scatter_base(self, outputTensor: Any, inputTensor: Any, opts: Any = None) -> Work:  # noqa: N803
        opts = _options(ReduceScatterOptions, opts, "reduceOp")
        args = (outputTensor, inputTensor, opts.reduceOp)
        return self._run(rows.REDUCE_SCATTER_TENSOR, opts, [outputTensor], *args)

    def reduce_scatter_tensor_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Work:
        opts = _options(ReduceScatterOptions, opts, "reduceOp")
        pairs = zip(outputs, inputs, strict=True)
        calls = [(rows.REDUCE_SCATTER_TENSOR, (o, i, opts.reduceOp)) for o, i in pairs]
        return self._run_each("reduce_scatter_tensor_coalesced", opts, list(outputs), calls)

    # -- all_to_all ------------------------------------------------------------------------
    def alltoall_base(
        self,
        output: Any,
        input: Any,  # noqa: A002
        output_split_sizes: Sequence[int],
        input_split_sizes: Sequence[int],
        opts: Any = None,
    ) -> Work:
        """``opts``: an ``AllToAllOptions`` or (torch's other overload) a timeout."""
        opts = _options(AllToAllOptions, *((opts, None) if _is_options(opts) else (None, None, opts)))
        outs, ins = list(output_split_sizes) or None, list(input_split_sizes) or None
        return self._run(rows.ALL_TO_ALL_SINGLE, opts, [output], output, input, outs, ins)

    def alltoall(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> Work:
        opts = _options(AllToAllOptions, opts, None)
        outs = list(output_tensors)
        return self._run(rows.ALL_TO_ALL, opts, [outs], outs, list(input_tensors))

    # -- barriers --------------------------------------------------------------------------
    def barrier(self, opts: Any = None) -> Work:
        """``barrier(opts)`` or ``barrier(timeout)``; a timeout set here bounds this call."""
        opts = _options(BarrierOptions, *((opts, None) if _is_options(opts) else (None, None, opts)))
        return self._run(rows.BARRIER, opts, [], timeout_seconds(opts))

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        run(rows.MONITORED_BARRIER, self, False, timeout, wait_all_ranks)

    # -- point to point (peers are group ranks) --------------------------------------------
    def send(self, tensors: Sequence[Any], dstRank: int, tag: int = 0) -> Work:  # noqa: N803
        work: Work = run(p2p_rows.ISEND, self, False, _one(tensors, "send"), None, int(dstRank), int(tag))
        return work

    def recv(self, tensors: Sequence[Any], srcRank: int, tag: int = 0) -> Work:  # noqa: N803
        work: Work = run(p2p_rows.IRECV, self, False, _one(tensors, "recv"), None, int(srcRank), int(tag))
        return work

    def recv_anysource(self, tensors: Sequence[Any], tag: int = 0) -> Work:
        work: Work = run(p2p_rows.IRECV, self, False, _one(tensors, "recv"), None, None, int(tag))
        return work


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _listed(tensors: Any) -> list[Any]:
    """torch's overloads take a list of tensors or one tensor."""
    return list(tensors) if _is_list(tensors) else [tensors]


def _one(tensors: Sequence[Any], op: str) -> Any:
    if len(tensors) != 1:
        raise ArgumentError(
            f"ProcessGroup.{op}: takes a list of exactly one tensor (got {len(tensors)}); "
            f"several tensors per process were one per GPU: see the *_multigpu functions"
        )
    return tensors[0]


def _is_options(value: Any) -> bool:
    return value is not None and hasattr(value, "asyncOp")


def _options(cls: type, value: Any, field: str | None, timeout: Any = None) -> Any:
    """The call's options: ``value`` when it is an options object (accord's or torch's),
    else a new ``cls()`` with ``field`` set to ``value`` (torch's overloads: an op, a root)
    and ``timeout`` when given."""
    if _is_options(value):
        return value
    opts = cls()
    if value is not None and field is not None:
        setattr(opts, field, value)
    if timeout is not None:
        opts.timeout = timeout
    return opts
