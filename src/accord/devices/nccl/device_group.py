"""CUDA tensors through torch's NCCL: one torch process group per accord group and device kind.

Owns: ``DeviceGroup`` (a torch ``ProcessGroupNCCL`` made on the accord group's own store, for
the same ranks, and every collective and p2p call of accord's API translated into that
backend's calls: options, reduce ops, the list shapes torch's backends take) and ``create``
(what ``init_process_group("cpu:accord,cuda:nccl")`` and ``new_group`` call for each group).
Must not know about accord's transports, algorithms or the functional API's argument
checking: the API layer routes a call here when ``claims`` accepts its tensor.

The stand-in: machines without a GPU cannot run NCCL, so with ``ACCORD_NCCL_STANDIN=gloo`` the
device group is torch's ProcessGroupGloo instead, and it claims CPU *torch* tensors (NumPy
arrays stay on accord's own backend). Everything else is the same code: one group per device
kind and accord group, made on the store accord hands over, the same routing and translation.

Async calls return torch's own ``Work`` (what torch returns for NCCL); blocking calls wait on
it, which for NCCL orders the current CUDA stream after the collective, as torch does (torch's
NCCL may return no Work for a blocking call, having done that itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from ... import config
from ...errors import ArgumentError
from ...reduce_ops import RedOpType, as_reduce_op, supports_complex
from ...store.base import Store
from ...store.prefix_store import PrefixStore
from .c10d_store import C10dStore

_TORCH_OPS = {
    RedOpType.SUM: dist.ReduceOp.SUM,
    RedOpType.AVG: dist.ReduceOp.AVG,
    RedOpType.PRODUCT: dist.ReduceOp.PRODUCT,
    RedOpType.MIN: dist.ReduceOp.MIN,
    RedOpType.MAX: dist.ReduceOp.MAX,
    RedOpType.BAND: dist.ReduceOp.BAND,
    RedOpType.BOR: dist.ReduceOp.BOR,
    RedOpType.BXOR: dist.ReduceOp.BXOR,
}


def standin() -> str | None:
    """The torch backend standing in for NCCL ("gloo"), or None: the real NCCL."""
    return config.nccl_standin()


def create(
    kind: str, store: Store, prefix: str, rank: int, size: int, timeout: float, device_id: Any = None
) -> DeviceGroup:
    """The torch backend for ``kind`` ("cuda") tensors of one accord group: group rank
    ``rank`` of ``size``, meeting its peers under ``prefix`` of ``store``.

    Raises:
        ValueError: torch has no NCCL (a CPU build of torch), naming what to do instead.
    """
    if kind != "cuda":
        raise ValueError(f"accord routes only CUDA tensors to NCCL; got device kind {kind!r}")
    bridge = C10dStore(PrefixStore(prefix, store))
    if standin() == "gloo":
        gloo = dist.ProcessGroupGloo(bridge, rank, size, timedelta(seconds=timeout))
        return DeviceGroup(gloo, bridge, "cpu", "gloo (standing in for nccl)")
    if not dist.is_nccl_available():
        raise ValueError(
            f"backend 'cuda:nccl' needs torch built with NCCL; this torch ({torch.__version__}) "
            f"has none (a CPU build). Install a CUDA build of torch, or use backend 'accord' "
            f"with CPU tensors"
        )
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timedelta(seconds=timeout)
    backend = dist.ProcessGroupNCCL(bridge, rank, size, options)
    if device_id is not None:
        backend.eager_connect_single_device(torch.device(device_id))
    return DeviceGroup(backend, bridge, "cuda", "nccl")


class DeviceGroup:
    """One torch backend carrying an accord group's tensors of one device kind."""

    backend_name = "nccl"  # what the user asked for (get_backend_config), stand-in or not

    def __init__(self, backend: Any, bridge: C10dStore, device_type: str, name: str) -> None:
        self.backend = backend
        self.name = name
        self._bridge = bridge  # torch keeps only its C++ half: the overrides live here
        self._device_type = device_type

    def __repr__(self) -> str:
        return f"<DeviceGroup {self.name} rank {self.backend.rank()}/{self.backend.size()}>"

    def claims(self, tensor: Any) -> bool:
        """Whether ``tensor`` goes to this group (a torch tensor on its device)."""
        return isinstance(tensor, torch.Tensor) and tensor.device.type == self._device_type

    def close(self) -> None:
        """Shut the torch backend down and let it go now, while Python is running: its
        destructor joins its worker threads (releasing the GIL). Left to interpreter exit, a
        worker that drops a finished call's last tensor reference needs the GIL, finds the
        interpreter finalizing, and aborts the process ("terminate called without an active
        exception")."""
        backend, self.backend = self.backend, _Closed(self.name)
        shutdown = getattr(backend, "shutdown", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001 — a backend that failed may refuse; nothing to keep
                pass
        del backend

    # -- collectives --------------------------------------------------------------------

    def all_reduce(self, tensor: Any, op: Any, async_op: bool) -> Any:
        opts = _options(c10d.AllreduceOptions, async_op)
        opts.reduceOp = _torch_op(op, tensor)
        return _finish(self.backend.allreduce([_real(tensor)], opts), async_op)

    def broadcast(self, tensor: Any, root: int, async_op: bool) -> Any:
        opts = _options(c10d.BroadcastOptions, async_op)
        opts.rootRank, opts.rootTensor = root, 0
        return _finish(self.backend.broadcast([_real(tensor)], opts), async_op)

    def reduce(self, tensor: Any, root: int, op: Any, async_op: bool) -> Any:
        opts = _options(c10d.ReduceOptions, async_op)
        opts.reduceOp, opts.rootRank, opts.rootTensor = _torch_op(op, tensor), root, 0
        return _finish(self.backend.reduce([_real(tensor)], opts), async_op)

    def all_gather(self, tensor_list: Sequence[Any], tensor: Any, async_op: bool) -> Any:
        outputs = [_real(t) for t in tensor_list]
        opts = _options(c10d.AllgatherOptions, async_op)
        return _finish(self.backend.allgather([outputs], [_real(tensor)], opts), async_op)

    def all_gather_into_tensor(self, output: Any, input: Any, async_op: bool) -> Any:  # noqa: A002
        opts = _options(c10d.AllgatherOptions, async_op)
        return _finish(self.backend._allgather_base(_real(output), _real(input), opts), async_op)

    def gather(self, tensor: Any, gather_list: Any, root: int, async_op: bool) -> Any:
        outputs = [[_real(t) for t in self._rooted_list(gather_list, root, "gather_list", "destination")]]
        outputs = outputs if self.backend.rank() == root else []
        opts = _options(c10d.GatherOptions, async_op)
        opts.rootRank = root
        return _finish(self.backend.gather(outputs, [_real(tensor)], opts), async_op)

    def scatter(self, tensor: Any, scatter_list: Any, root: int, async_op: bool) -> Any:
        inputs = [[_real(t) for t in self._rooted_list(scatter_list, root, "scatter_list", "source")]]
        inputs = inputs if self.backend.rank() == root else []
        opts = _options(c10d.ScatterOptions, async_op)
        opts.rootRank = root
        return _finish(self.backend.scatter([_real(tensor)], inputs, opts), async_op)

    def reduce_scatter(self, output: Any, input_list: Sequence[Any], op: Any, async_op: bool) -> Any:
        opts = _options(c10d.ReduceScatterOptions, async_op)
        opts.reduceOp = _torch_op(op, output)
        inputs = [_real(t) for t in input_list]
        return _finish(self.backend.reduce_scatter([_real(output)], [inputs], opts), async_op)

    def reduce_scatter_tensor(self, output: Any, input: Any, op: Any, async_op: bool) -> Any:  # noqa: A002
        opts = _options(c10d.ReduceScatterOptions, async_op)
        opts.reduceOp = _torch_op(op, output)
        return _finish(self.backend._reduce_scatter_base(_real(output), _real(input), opts), async_op)

    def all_to_all(self, output_list: Sequence[Any], input_list: Sequence[Any], async_op: bool) -> Any:
        opts = _options(c10d.AllToAllOptions, async_op)
        return _finish(
            self.backend.alltoall([_real(t) for t in output_list], [_real(t) for t in input_list], opts),
            async_op,
        )

    def all_to_all_single(
        self,
        output: Any,
        input: Any,  # noqa: A002
        output_split_sizes: Any,
        input_split_sizes: Any,
        async_op: bool,
    ) -> Any:
        opts = _options(c10d.AllToAllOptions, async_op)
        work = self.backend.alltoall_base(
            _real(output), _real(input), _splits(output_split_sizes), _splits(input_split_sizes), opts
        )
        return _finish(work, async_op)

    def _rooted_list(self, tensors: Any, root: int, what: str, role: str) -> list[Any]:
        """The root's list (one tensor per rank), checked as torch checks it."""
        listed: list[Any] = list(tensors or [])
        if self.backend.rank() != root:
            if listed:
                raise ArgumentError(f"Argument ``{what}`` must NOT be specified on non-{role} ranks.")
            return listed
        if len(listed) != self.backend.size():
            raise ArgumentError(
                f"Argument ``{what}`` on the {role} rank needs one tensor per rank "
                f"({self.backend.size()}), got {len(listed)}"
            )
        return listed

    # -- point to point -----------------------------------------------------------------

    def isend(self, tensor: Any, peer: int, tag: int) -> Any:
        return self.backend.send([_real(tensor)], peer, tag)

    def irecv(self, tensor: Any, peer: int | None, tag: int) -> Any:
        if peer is None:
            return self.backend.recv_anysource([_real(tensor)], tag)
        return self.backend.recv([_real(tensor)], peer, tag)

    def recv(self, tensor: Any, peer: int | None, tag: int) -> int:
        """Receive; returns the sender's group rank."""
        work = self.irecv(tensor, peer, tag)
        work.wait()
        return work._source_rank() if peer is None else peer

    def batch(self, ops: Sequence[tuple[bool, Any, int, int]]) -> list[Any]:
        """Post (is_send, tensor, peer, tag) ops together: one coalesced Work where the
        backend groups p2p calls (NCCL: so a ring of sends and receives cannot deadlock),
        else one Work per op."""
        coalesce = bool(getattr(self.backend, "supports_coalescing", False))
        if coalesce:
            self.backend._start_coalescing()
        works = [
            self.isend(t, peer, tag) if is_send else self.irecv(t, peer, tag) for is_send, t, peer, tag in ops
        ]
        if coalesce:
            return [self.backend._end_coalescing()]
        return works


def _options(cls: Any, async_op: bool) -> Any:
    opts = cls()
    opts.asyncOp = async_op
    return opts


def _finish(work: Any, async_op: bool) -> Any:
    """The Work for an async call; else wait for it. A blocking call on torch's NCCL may
    return no Work at all (None: it ordered the current stream after the collective in C++
    already), as torch's own front end allows (``elif work is not None: work.wait()``)."""
    if async_op:
        return work
    if work is not None:
        work.wait()
    return None


def _torch_op(op: Any, tensor: Any) -> Any:
    """torch's ReduceOp for accord's (or torch's own, passed through)."""
    if isinstance(op, dist.ReduceOp.RedOpType):
        return dist.ReduceOp(op)
    if type(op) is dist.ReduceOp:
        return op
    reduce = as_reduce_op(op)
    if reduce.op == RedOpType.PREMUL_SUM:
        assert reduce.factor is not None  # (as_reduce_op gives every PREMUL_SUM its factor)
        return dist._make_nccl_premul_sum(reduce.factor)
    if isinstance(tensor, torch.Tensor) and tensor.is_complex() and not supports_complex(reduce):
        raise ArgumentError(
            f"ReduceOp.{reduce.op.name} is not defined for complex tensors; use "
            f"SUM, AVG or PREMUL_SUM (see supports_complex)"
        )
    return dist.ReduceOp(_TORCH_OPS[reduce.op])


def _real(tensor: Any) -> Any:
    """A complex tensor as its real view (what torch's front end hands NCCL)."""
    if isinstance(tensor, torch.Tensor) and tensor.is_complex():
        return torch.view_as_real(tensor)
    return tensor


def _splits(sizes: Any) -> list[int]:
    return [] if sizes is None else [int(s) for s in sizes]


class _Closed:
    """What a closed DeviceGroup holds instead of its backend: any use says so."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise RuntimeError(
            f"this group's {self._name} backend was shut down (destroy_process_group); make a new group"
        )
