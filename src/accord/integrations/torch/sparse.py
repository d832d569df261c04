"""all_reduce of a sparse COO tensor, as torch's gloo backend does it (DDP with sparse
embedding gradients).

Owns: the exchange — every rank's nnz, then every rank's indices and values (uneven
all_gathers, straight into their destination tensors) — and the sum (torch's coalesce adds
duplicate indices). The input tensor becomes the coalesced sum in place, as with gloo. It
runs in the caller's thread (its three collectives depend on each other's results, so it
cannot be queued as one call). Only SUM, as gloo. Must not know about the store.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...group import collective_ops
from ...group.process_group import ProcessGroup
from ...reduce_ops import RedOpType, ReduceOp
from .tensors import ArgumentError


def all_reduce(group: ProcessGroup, tensor: torch.Tensor, op: ReduceOp, async_op: bool) -> None:
    """Replace ``tensor`` (sparse COO) by the sum over the group's ranks; returns None (the
    work is done when this returns, async or not)."""
    if op.op != RedOpType.SUM:
        raise ArgumentError(f"all_reduce of a sparse tensor takes ReduceOp.SUM only (as gloo), got {op!r}")
    local = tensor.detach().coalesce()
    indices = local.indices().contiguous()
    values = local.values().contiguous()
    sparse_dim, dense_shape = local.sparse_dim(), tuple(values.shape[1:])
    n = group.size()
    counts = np.zeros(n, dtype=np.int64)
    collective_ops.all_gather_into_tensor(group, counts, np.array([values.shape[0]], np.int64), False)
    all_indices = [torch.empty((sparse_dim, int(c)), dtype=torch.int64) for c in counts]
    collective_ops.all_gather(group, all_indices, indices, False)
    all_values = [torch.empty((int(c), *dense_shape), dtype=values.dtype) for c in counts]
    collective_ops.all_gather(group, all_values, values, False)
    total = torch.sparse_coo_tensor(
        torch.cat(all_indices, dim=1), torch.cat(all_values), local.shape, check_invariants=False
    ).coalesce()
    with torch.no_grad():
        tensor.copy_(total)
    return None


def is_sparse(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.layout is torch.sparse_coo
