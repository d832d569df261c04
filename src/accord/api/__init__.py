"""The torch.distributed-compatible functional API, over the default World."""

from .collectives import all_reduce, barrier, broadcast
from .lifecycle import (build_world, destroy_process_group, get_backend, get_backend_config,
                        get_global_rank, get_group_rank, get_node_local_rank, get_pg_count,
                        get_process_group_ranks, get_rank, get_world_size, init_process_group,
                        is_initialized, is_torchelastic_launched, new_group)
from .p2p import irecv, isend, recv, send

__all__ = [
    "all_reduce", "barrier", "broadcast", "build_world", "destroy_process_group", "get_backend",
    "get_backend_config", "get_global_rank", "get_group_rank", "get_node_local_rank",
    "get_pg_count", "get_process_group_ranks", "get_rank", "get_world_size",
    "init_process_group", "irecv", "is_initialized", "is_torchelastic_launched", "isend",
    "new_group", "recv", "send",
]
