"""accord: torch.distributed's communication API (c10d) in Python.

``import accord as dist`` and a torch.distributed program runs with NumPy arrays or CPU torch
tensors as its buffers: processes on one host talk through shared memory, hosts over TCP,
started by ``accordrun`` or any launcher that sets the env:// contract.
"""

import sys as _sys

from . import backend_names as _backend_names
from .api import (
    SHRINK_ABORT,
    SHRINK_DEFAULT,
    P2POp,
    all_gather,
    all_gather_into_tensor,
    all_gather_object,
    all_gather_single,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    batch_isend_irecv,
    broadcast,
    broadcast_object_list,
    comm_stats,
    destroy_process_group,
    dump_flight_recorder,
    gather,
    gather_object,
    get_backend,
    get_backend_config,
    get_global_rank,
    get_group_rank,
    get_node_local_rank,
    get_pg_count,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    grow_group,
    init_process_group,
    irecv,
    is_initialized,
    is_torchelastic_launched,
    isend,
    join_process_group,
    lost_ranks,
    monitored_barrier,
    new_group,
    new_subgroups,
    new_subgroups_by_enumeration,
    recv,
    recv_object_list,
    reduce,
    reduce_scatter,
    reduce_scatter_single,
    reduce_scatter_tensor,
    scatter,
    scatter_object_list,
    send,
    send_object_list,
    set_object_policy,
    shrink_group,
    split_group,
)
from .api import coalesced as _coalesced
from .api import collectives as _collectives
from .api import handles as _handles
from .api.coalesced import all_gather_coalesced, all_reduce_coalesced
from .api.group_methods import ProcessGroup
from .api.handles import breakpoint  # noqa: A004 — torch's name (torch.distributed.breakpoint)
from .api.multigpu import (
    all_gather_multigpu,
    all_reduce_multigpu,
    broadcast_multigpu,
    reduce_multigpu,
    reduce_scatter_multigpu,
)
from .api.options import (
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
)
from .auth import InsecureListenWarning
from .backend_names import Backend, get_default_backend_for_device, is_backend_available
from .diagnostics.debug import DebugLevel, get_debug_level, set_debug_level, set_debug_level_from_env
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    AuthenticationError,
    CollectiveMismatchError,
    DestroyedGroupError,
    DistBackendError,
    DistError,
    DistNetworkError,
    DistStoreError,
    DistTimeoutError,
    InternalError,
    NotInitializedError,
    PeerError,
    QueueEmptyError,
    ShortListError,
    StoreLimitError,
    StoreTimeoutError,
)
from .group import Future, Work
from .group.pickling import ObjectPolicy
from .launcher.spawn import ProcessException, ProcessExitedException, ProcessRaisedException, spawn
from .reduce_ops import ReduceOp, _make_nccl_premul_sum, reduce_op, supports_complex
from .rendezvous import register_rendezvous_handler, rendezvous
from .store import FileStore, HashStore, PrefixStore, Store, TCPStore
from .timeouts import DEFAULT_PG_TIMEOUT as default_pg_timeout  # noqa: N811 — torch's name
from .version import version as _version
from .world import GroupMember, group

# torch's private names that libraries call (torch.distributed.distributed_c10d's)
_get_default_group = _handles.default_group
_rank_not_in_group = _handles.rank_not_in_group
_get_process_group_name = _handles.process_group_name
_coalescing_manager = _coalesced.coalescing_manager
_CoalescingManager = _coalesced.CoalescingManager
_all_gather_base = _collectives.all_gather_base
_reduce_scatter_base = _collectives.reduce_scatter_base

__version__ = _version()  # pyproject.toml's, read from the source tree or the installed metadata


def _register_with_torch() -> None:
    """With torch already imported, make init_process_group("accord") available at once
    (otherwise the torch.backends entry point does it when torch is imported)."""
    if "torch" not in _sys.modules:
        return
    try:
        from .integrations.torch import register

        register()
    except Exception:
        import logging

        logging.getLogger("accord").debug("could not register the torch backend", exc_info=True)


_register_with_torch()


def is_available() -> bool:
    """accord is always available (it needs only NumPy)."""
    return True


def is_gloo_available() -> bool:
    """True: accord's CPU backend answers to the name "gloo"."""
    return True


def is_mpi_available() -> bool:
    """Whether backend "mpi" can be used (mpi4py is installed: ``pip install "accord[mpi]"``)."""
    return _backend_names.is_mpi_available()


def is_nccl_available() -> bool:
    """Whether CUDA tensors can go to NCCL ("cpu:accord,cuda:nccl"): torch is installed and
    built with NCCL (imports torch when it is installed)."""
    return _backend_names.is_nccl_available()


def is_ucc_available() -> bool:
    return False


def is_xccl_available() -> bool:
    return False


__all__ = [
    "AllToAllOptions",
    "AllgatherOptions",
    "AllreduceCoalescedOptions",
    "AllreduceOptions",
    "BarrierOptions",
    "BroadcastOptions",
    "GatherOptions",
    "ReduceOptions",
    "ReduceScatterOptions",
    "ScatterOptions",
    "all_gather_coalesced",
    "all_gather_multigpu",
    "all_reduce_coalesced",
    "all_reduce_multigpu",
    "breakpoint",
    "broadcast_multigpu",
    "default_pg_timeout",
    "get_default_backend_for_device",
    "reduce_multigpu",
    "reduce_scatter_multigpu",
    "ArgumentError",
    "ArgumentTypeError",
    "ShortListError",
    "DestroyedGroupError",
    "AuthenticationError",
    "InsecureListenWarning",
    "Backend",
    "CollectiveMismatchError",
    "DistBackendError",
    "DistError",
    "DistNetworkError",
    "DistStoreError",
    "DistTimeoutError",
    "FileStore",
    "Future",
    "GroupMember",
    "HashStore",
    "InternalError",
    "NotInitializedError",
    "PeerError",
    "PrefixStore",
    "ProcessGroup",
    "QueueEmptyError",
    "ReduceOp",
    "Store",
    "StoreLimitError",
    "StoreTimeoutError",
    "TCPStore",
    "Work",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_backend",
    "get_backend_config",
    "get_global_rank",
    "get_group_rank",
    "get_node_local_rank",
    "get_pg_count",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_backend_available",
    "is_gloo_available",
    "is_initialized",
    "is_mpi_available",
    "is_nccl_available",
    "is_torchelastic_launched",
    "is_ucc_available",
    "is_xccl_available",
    "isend",
    "new_group",
    "recv",
    "reduce_op",
    "register_rendezvous_handler",
    "rendezvous",
    "send",
    "supports_complex",
    "_make_nccl_premul_sum",
    "ObjectPolicy",
    "P2POp",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_gather_single",
    "all_to_all",
    "all_to_all_single",
    "batch_isend_irecv",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "monitored_barrier",
    "new_subgroups",
    "new_subgroups_by_enumeration",
    "recv_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send_object_list",
    "set_object_policy",
    "split_group",
    "shrink_group",
    "grow_group",
    "join_process_group",
    "lost_ranks",
    "SHRINK_DEFAULT",
    "SHRINK_ABORT",
    "ProcessException",
    "ProcessExitedException",
    "ProcessRaisedException",
    "spawn",
    "DebugLevel",
    "comm_stats",
    "dump_flight_recorder",
    "get_debug_level",
    "set_debug_level",
    "set_debug_level_from_env",
]
