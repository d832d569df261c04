"""The torch-compatible collective functions (module level): thin wrappers over ``group``.

Owns: torch's signatures, defaults and return conventions (None when blocking, a Work when
``async_op=True``, None on non-member ranks). Ranks in signatures are global, as torch's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..group import collective_ops
from ..group.work import Work
from ..reduce_ops import ReduceOp
from ..timeouts import to_seconds
from .common import group_rank, resolve_group


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across the group in place; every rank gets the result."""
    pg = resolve_group(group, "all_reduce")
    if pg is None:
        return None
    return collective_ops.all_reduce(pg, tensor, op, async_op)


def broadcast(tensor: Any, src: int | None = None, group: Any = None, async_op: bool = False,
              group_src: int | None = None) -> Work | None:
    """Copy ``tensor`` from rank ``src`` (global) or ``group_src`` into every rank's tensor."""
    pg = resolve_group(group, "broadcast")
    if pg is None:
        return None
    root = group_rank(pg, src, group_src, "src")
    return collective_ops.broadcast(pg, tensor, root, async_op)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None,
            timeout: timedelta | None = None) -> Work | None:
    """Block until every rank of the group has called barrier (``timeout`` for this call)."""
    pg = resolve_group(group, "barrier")
    if pg is None:
        return None
    seconds = None if timeout is None else to_seconds(timeout)
    return collective_ops.barrier(pg, async_op, seconds)
