"""The torch.distributed-compatible functional API, over the default World."""

from .collectives import (all_gather, all_gather_into_tensor, all_gather_single, all_reduce,
                          all_to_all, all_to_all_single, barrier, broadcast, gather,
                          monitored_barrier, reduce, reduce_scatter, reduce_scatter_single,
                          reduce_scatter_tensor, scatter)
from .lifecycle import (build_world, comm_stats, destroy_process_group, dump_flight_recorder,
                        get_backend, get_backend_config,
                        get_global_rank, get_group_rank, get_node_local_rank, get_pg_count,
                        get_process_group_ranks, get_rank, get_world_size, init_process_group,
                        is_initialized, is_torchelastic_launched, new_group)
from .objects import (all_gather_object, broadcast_object_list, gather_object,
                      scatter_object_list, set_object_policy)
from .p2p import (P2POp, batch_isend_irecv, irecv, isend, recv, recv_object_list, send,
                  send_object_list)
from .subgroups import new_subgroups, new_subgroups_by_enumeration, split_group

__all__ = [
    "P2POp", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_gather_single",
    "all_reduce", "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv",
    "broadcast", "broadcast_object_list", "build_world", "comm_stats", "dump_flight_recorder",
    "destroy_process_group", "gather",
    "gather_object", "get_backend", "get_backend_config", "get_global_rank", "get_group_rank",
    "get_node_local_rank", "get_pg_count", "get_process_group_ranks", "get_rank",
    "get_world_size", "init_process_group", "irecv", "is_initialized",
    "is_torchelastic_launched", "isend", "monitored_barrier", "new_group", "new_subgroups",
    "new_subgroups_by_enumeration", "recv", "recv_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
    "send_object_list", "set_object_policy", "split_group",
]
