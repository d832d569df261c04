"""The coalesced calls torch keeps for libraries: ``all_reduce_coalesced`` and
``all_gather_coalesced`` (deprecated in torch, still called), and ``_coalescing_manager``
(private in torch, called by Megatron-style gradient buckets).

Owns: their signatures, warnings and return conventions, as torch 2.13's: the two functions
warn (FutureWarning, torch's text), run the group's method-level ``allreduce_coalesced`` /
``allgather_coalesced``, and return, when ``async_op``, the call's *Future* (torch returns
``work.get_future()`` there, not a Work); non-members get None with torch's warning. The
manager's block: torch defers the calls made in it and runs them as one coalesced call at
its end; accord runs each call when it is made (a blocking one is done when it returns, as
accord has no faster coalesced form to wait for) and notes the async ones
(``pipeline.collecting``), which the manager's ``wait()`` waits for — with ``async_ops``
True the caller waits (``cm.wait()``), else the block's end does. The results are torch's.
Must not know how a call runs (the pipeline and the group's methods do).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from ..reduce_ops import ReduceOp
from .common import resolve_group
from .options import AllgatherOptions, AllreduceCoalescedOptions
from .pipeline import collecting

_DEPRECATED = (
    "`torch.distributed.{name}` will be deprecated. If you must use it, please revisit our "
    "documentation later at https://pytorch.org/docs/main/distributed.html#collective-functions"
)


def all_reduce_coalesced(
    tensors: Any, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Any:
    """Reduce each tensor of ``tensors`` across the group, in place (torch's deprecated
    function: torch does not check that the ranks' shapes agree; accord does, per tensor).

    Returns:
        The call's Future if ``async_op`` (as torch's), else None; None on non-members.
    """
    warnings.warn(_DEPRECATED.format(name="all_reduce_coalesced"), FutureWarning, stacklevel=2)
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    pg = resolve_group(group, "all_reduce_coalesced")
    if pg is None:
        return None
    opts = AllreduceCoalescedOptions()
    opts.reduceOp, opts.asyncOp = op, async_op
    work = pg.allreduce_coalesced(tensors, opts)  # type: ignore[attr-defined]  # (the API's class)
    return _finish(work, async_op)


def all_gather_coalesced(
    output_tensor_lists: Any, input_tensor_list: Any, group: Any = None, async_op: bool = False
) -> Any:
    """``output_tensor_lists[r][k]`` receives rank r's ``input_tensor_list[k]`` (torch's
    deprecated function).

    Returns:
        The call's Future if ``async_op`` (as torch's), else None; None on non-members.
    """
    warnings.warn(_DEPRECATED.format(name="all_gather_coalesced"), FutureWarning, stacklevel=2)
    pg = resolve_group(group, "all_gather_coalesced")
    if pg is None:
        return None
    if not isinstance(output_tensor_lists, list):
        raise TypeError("Invalid function argument: output_tensor_lists should be a list")
    opts = AllgatherOptions()
    opts.asyncOp = async_op
    work = pg.allgather_coalesced(output_tensor_lists, list(input_tensor_list), opts)  # type: ignore[attr-defined]
    return _finish(work, async_op)


def _finish(work: Any, async_op: bool) -> Any:
    if async_op:
        return work.get_future()
    work.wait()
    return None


class CoalescingManager:
    """What ``_coalescing_manager`` yields (torch's ``_CoalescingManager``): ``works``, and
    ``wait()`` for them all."""

    def __init__(self) -> None:
        self.works: list[Any] = []

    def append(self, work: Any = None) -> None:
        if work:
            self.works.append(work)

    def wait(self) -> None:
        for work in self.works:
            work.wait()


@contextlib.contextmanager
def coalescing_manager(
    group: Any = None, device: Any = None, async_ops: bool = False
) -> Iterator[CoalescingManager]:
    """torch's ``_coalescing_manager``: the async calls made on ``group`` in the block are
    the manager's ``works``; with ``async_ops`` False the block's end waits for them.
    ``device`` is accepted and not needed (torch uses it for backends without coalesced
    forms)."""
    pg = resolve_group(group, "_coalescing_manager")
    cm = CoalescingManager()
    outer = collecting.get()
    if outer is not None and pg in outer:
        raise ValueError("ProcessGroup has non-empty op list at the start of coalescing")
    works: list[Any] = []
    token = collecting.set({**(outer or {}), pg: works})
    try:
        yield cm
    finally:
        collecting.reset(token)
    for work in works:
        cm.append(work)
    if not async_ops:
        cm.wait()
