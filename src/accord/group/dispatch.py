"""Dispatch: how a checked collective call maps onto an algorithm and runs on the group.

Owns: ``launch`` — choose the algorithm by size and the group's kind, make the fingerprint
(``plans.choose``, which the short paths share), then queue the call as its blocking form
(async on accord's engine), compose it of calls on the inner groups (hierarchical), run it
planned (a blocking shared-memory call) or as the engine's next call — and
``check_group_rank``, the root/peer rank check every caller makes first. Split from
``collective_ops`` (which owns what each collective checks and hands ``launch``) so that
module stays under 400 lines, and so ``p2p`` and ``objects`` need not import the
collectives for the rank check. A hierarchical call's inner calls go through
``collective_ops``, found by name in ``sys.modules``: it imports this module, so importing it
back would be a circle. Must not know about the default world or env variables.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..arrays import Buffer
from ..collectives import registry
from ..errors import ArgumentError, ArgumentTypeError, DistError, with_context
from .hierarchy import HIERARCHICAL
from .plans import choose
from .process_group import ProcessGroup
from .work import Work

#: The module whose functions a hierarchical call runs on its inner groups.
_COLLECTIVE_OPS = f"{__package__}.collective_ops"


def check_group_rank(group: ProcessGroup, rank: int, what: str) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise ArgumentTypeError(f"{what} must be an int rank, got {type(rank).__name__}")
    if not 0 <= rank < group.size():
        raise ArgumentError(f"{what}={rank} is out of range for a group of size {group.size()}")
    return rank


def launch(
    group: ProcessGroup,
    collective: str,
    nbytes: int,
    fp_buf: Buffer | None,
    args: Sequence[Any],
    outputs: Sequence[Buffer],
    result: list[Any],
    async_op: bool,
    root: int = -1,
    timeout: float | None = None,
    count: int | None = None,
    inputs: Sequence[Any] = (),
    blocking: Callable[[], Any] | None = None,
) -> Work | None:
    """Choose the algorithm for ``nbytes`` on this group, then run ``algorithm(call, *args)``.

    ``fp_buf`` gives the dtype and count every rank must agree on (``count`` replaces the
    count); ``outputs`` are written back (non-contiguous views) once the call succeeded;
    ``result`` is what Work.result() returns; ``inputs`` are the user's input tensors (the
    shapes torch's profiler records, as gloo's). An async call whose arguments passed
    every check is queued as ``blocking``, the same call made blocking: it runs later as
    fast as a blocking call does, its short path and compiled round included.
    """
    algorithm, fp = choose(group, collective, nbytes, fp_buf, root, count)
    if async_op and blocking is not None and group.engine.plannable:

        def queued() -> list[Any]:
            blocking()
            return result

        return group.planner.defer(collective, queued, result, inputs)
    if algorithm.kind == HIERARCHICAL:  # calls on the group's inner groups, as one call of it
        hierarchy = group.engine.hierarchy
        assert hierarchy is not None  # (a hierarchical algorithm is chosen only where there is one)

        def composed(call: Any) -> None:
            try:
                hierarchy.run(collective, args, sys.modules[_COLLECTIVE_OPS])
            except DistError as exc:  # say which call of this group it was, then the inner one's words
                raise with_context(exc, f"{call} (hierarchical: inside hosts, then between them)") from exc

        return group.engine.run_collective(
            collective, fp, composed, outputs, result, async_op, timeout, inputs=inputs
        )
    if timeout is None and group.engine.plannable:
        if not async_op and algorithm.kind != registry.MESSAGES:
            group.planner.run_planned(collective, fp, algorithm, args, inputs)  # shared memory: short path
            for out in outputs:
                out.finish()
            return None

    def body(call: Any) -> None:
        algorithm.run(call, *args)

    return group.engine.run_collective(
        collective,
        fp,
        body,
        outputs,
        result,
        async_op,
        timeout,
        shared=algorithm.kind != registry.MESSAGES,
        inputs=inputs,
    )
