"""The DETAIL check: before a collective runs, every rank compares its arguments with the others'.

Owns: describing a call's arguments, which its caller names (dtype and shape of every array,
of every list element, split sizes by value, object lists by length, the reduce op, the
root), exchanging the descriptions over a companion group of the same ranks (so the user's
group keeps its call numbers), the rules of what must agree for each collective (uneven
all_gather / all_to_all are allowed: there the per-pair sizes must match), and the error
naming each side. At DETAIL the call's time is logged too. Must not know about the flight
recorder or the store, nor torch's signatures (the API's pipeline names the arguments).

Every rank receives every description, so every rank finds the same problems and raises the
same CollectiveMismatchError before any data moves; the group stays usable.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from ..errors import CollectiveMismatchError
from ..group import objects as group_objects
from ..group.process_group import ProcessGroup

log = logging.getLogger("accord")
_COMPANION_SALT = 0x5DE7A11


#: In ``run``'s names: the argument that is the call's root (compared as the root, not as data).
ROOT = "root"


def run(
    pg: ProcessGroup,
    collective: str,
    call: Callable[[], Any],
    names: tuple[str | None, ...],
    args: tuple[Any, ...],
) -> Any:
    """Check the arguments of ``collective`` across ranks, run ``call``, log its time.

    ``names`` names ``args`` one by one, as ``SAME`` knows them (``ROOT``: the root; None: an
    argument not compared, such as a list only the root passes).
    """
    root, arguments = None, {}
    for name, value in zip(names, args):
        if name == ROOT:
            root = value
        elif name is not None:
            arguments[name] = value
    check(pg, collective, root, arguments)
    start = time.perf_counter()
    result = call()
    if result is None:  # a blocking call: it has finished
        log.info(
            "%s #%d on rank %d: %.3f ms",
            collective,
            pg.last_seq,
            pg.global_rank,
            (time.perf_counter() - start) * 1e3,
        )
    return result


def check(pg: ProcessGroup, op: str, root: int | None, arguments: dict[str, Any]) -> None:
    mine = {"op": op, "root": root, "args": {k: _DESCRIBE.get(k, describe)(v) for k, v in arguments.items()}}
    everyone: list[Any] = [None] * pg.size()
    group_objects.all_gather_object(companion(pg), everyone, mine)
    problems = compare(everyone)
    if problems:
        raise CollectiveMismatchError(
            f"{op} #{pg.last_seq + 1} on rank {pg.global_rank}: the DETAIL check "
            f"(ACCORD_DEBUG / TORCH_DISTRIBUTED_DEBUG) found that the ranks disagree: "
            + "; ".join(problems)
            + ". Nothing was sent; the group is still usable"
        )


def companion(pg: ProcessGroup) -> ProcessGroup:
    """The group of the same ranks the checks run on (made on first use, by every member)."""
    found = getattr(pg, "detail_companion", None)
    if found is None:
        gid = (pg.group_id * 2654435761 + _COMPANION_SALT) & 0xFFFFFFFF or 1
        found = pg.twin(gid, f"{pg.group_name}:detail-check")
        pg.detail_companion = found  # type: ignore[attr-defined]  # diagnostics' own, kept on the group
        pg.companions.append(found)
    return found


# -- describing --------------------------------------------------------------------------------
def describe(value: Any) -> Any:
    """Plain data standing for an argument: arrays by dtype and shape, lists element-wise."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": [int(d) for d in value.shape]}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, enum.Enum):  # ReduceOp's members
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "name", None)  # ReduceOp and friends
    return str(name if isinstance(name, str) else value)


def _splits(sizes: Any) -> Any:
    """Split sizes by value, as a list of ints (a tensor of sizes too)."""
    if sizes is None:
        return None
    try:
        return [int(v) for v in sizes]
    except (TypeError, ValueError):
        return describe(sizes)


def _length(objects: Any) -> Any:
    """An object list by its length (the objects themselves differ from rank to rank)."""
    return f"a list of {len(objects)}" if isinstance(objects, list) else type(objects).__name__


#: Arguments described otherwise than by ``describe``
_DESCRIBE = {"output_split_sizes": _splits, "input_split_sizes": _splits, "object_list": _length}


def _text(value: Any) -> str:
    if isinstance(value, dict) and "dtype" in value:
        return f"{value['dtype']}{value['shape']}"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return value if isinstance(value, str) else repr(value)


def _count(value: Any) -> int:
    return math.prod(value["shape"]) if isinstance(value, dict) and "shape" in value else 0


# -- comparing ---------------------------------------------------------------------------------
#: per collective: the arguments every rank must pass alike (root-only lists are left out,
#: and so are the inputs of uneven all_gather / all_to_all, checked pairwise below)
SAME = {
    "all_reduce": ("tensor", "op"),
    "broadcast": ("tensor",),
    "reduce": ("tensor", "op"),
    "all_gather": ("tensor_list",),
    "all_gather_into_tensor": ("output_tensor", "input_tensor"),
    "gather": ("tensor",),
    "scatter": ("tensor",),
    "reduce_scatter": ("input_list", "op"),
    "reduce_scatter_tensor": ("output", "input", "op"),
    "all_to_all": (),
    "all_to_all_single": (),
    "barrier": (),
    "broadcast_object_list": ("object_list",),
    "all_gather_object": (),
    "gather_object": (),
    "scatter_object_list": (),
}


def compare(everyone: list[dict[str, Any]]) -> list[str]:
    """What the ranks' descriptions disagree on (empty: nothing)."""
    ops = _differ([d["op"] for d in everyone])
    if ops:
        return [f"the collective: {ops}"]
    problems = []
    roots = _differ([d["root"] for d in everyone])
    if roots:
        problems.append(f"the root: {roots}")
    op = everyone[0]["op"]
    for name in SAME.get(op, ()):
        found = _differ([_text(d["args"].get(name)) for d in everyone])
        if found:
            problems.append(f"{name}: {found}")
    dtypes = _differ([_dtypes(d["args"]) for d in everyone])
    if dtypes:
        problems.append(f"the element types: {dtypes}")
    problems.extend(_pairwise(op, [d["args"] for d in everyone]))
    return problems


def _differ(values: list[Any]) -> str:
    """'float32[10] on rank 0; float32[20] on rank 1', or '' when all equal."""
    if all(v == values[0] for v in values):
        return ""
    groups: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(value if isinstance(value, str) else repr(value), []).append(rank)
    return "; ".join(
        f"{value} on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
        for value, ranks in groups.items()
    )


def _dtypes(args: dict[str, Any]) -> str:
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict) and "dtype" in v:
            found.add(v["dtype"])
        elif isinstance(v, list):
            for item in v:
                walk(item)

    for value in args.values():
        walk(value)
    return ",".join(sorted(found))


def _pairwise(op: str, args: list[dict[str, Any]]) -> list[str]:
    """Sizes that must match between pairs of ranks."""
    n = len(args)
    problems = []
    own = {"all_gather": ("tensor", "tensor_list"), "reduce_scatter": ("output", "input_list")}
    if op in own:  # each rank's own element of the list has the size of its single tensor
        single, listed = own[op]
        for r, a in enumerate(args):
            items = a.get(listed) or []
            if len(items) == n and _count(a.get(single)) != _count(items[r]):
                problems.append(
                    f"rank {r} passes {single} of {_count(a.get(single))} elements "
                    f"but {listed}[{r}] of {_count(items[r])}"
                )
    elif op in ("all_to_all", "all_to_all_single"):
        sends = [_pieces(a, "input", n) for a in args]
        recvs = [_pieces(a, "output", n) for a in args]
        for i in range(n):
            send = sends[i]
            for j in range(n):
                recv = recvs[j]
                if send and recv and send[j] != recv[i]:
                    problems.append(
                        f"rank {i} sends {send[j]} elements to rank {j}, which expects {recv[i]} from it"
                    )
    return problems


def _pieces(args: dict[str, Any], side: str, n: int) -> list[int] | None:
    """Elements per peer on one side of an all_to_all(_single)."""
    listed = args.get(f"{side}_tensor_list")
    if isinstance(listed, list):
        return [_count(v) for v in listed] if len(listed) == n else None
    whole, splits = args.get(side), args.get(f"{side}_split_sizes")
    if not isinstance(whole, dict) or not whole.get("shape"):
        return None
    rows = whole["shape"][0]
    per_row = math.prod(whole["shape"][1:])
    if splits is None or splits == []:
        if rows % n:
            return None
        splits = [rows // n] * n
    if not isinstance(splits, list) or len(splits) != n:
        return None
    return [int(s) * per_row for s in splits]
