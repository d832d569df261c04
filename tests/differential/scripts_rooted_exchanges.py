"""SPMD scripts for the collectives beyond all_reduce/broadcast: reduce, all_gather (list and
tensor), gather, scatter, reduce_scatter (list and tensor), all_to_all (list and single),
the object collectives, object p2p, batch_isend_irecv, monitored_barrier and subgroups.

Same contract as ``scripts``: ``fn(dist, rank, world_size, make) -> dict`` of plain data, run
unchanged on torch.distributed (gloo) and on accord. Scripts with ``on_gloo=False`` use what
gloo rejects (uneven all_gather / all_to_all lists, stacked outputs, split_group); those are
checked against the docs' stated outputs or closed forms.

How the runner finds these scripts without being changed: it looks every name up in
``scripts.BY_NAME`` in its children. This module adds its scripts there when imported, and
the names it hands to ``runner.run_job`` are ``ScriptName`` objects: unpickling them in a
child imports this module first. (A ``scripts_module`` parameter on ``run_job`` would be the
cleaner hook; see the report.)

This module must not import torch: the accord-numpy children never load it.
"""

from __future__ import annotations

from typing import Any

from . import scripts
from .scripts import Make, Script, returned, state

DOCS_OBJECTS = ["foo", 12, {1: 2}]
DOCS_A2A_INPUTS = [[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15, 16, 17, 18], [20, 21, 22, 23, 24],
                   [30, 31, 32, 33, 34, 35, 36]]
DOCS_A2A_INPUT_SPLITS = [[2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1]]
DOCS_A2A_OUTPUT_SPLITS = [[2, 3, 2, 2], [2, 2, 1, 2], [1, 2, 1, 2], [1, 2, 1, 1]]
DATA_DTYPES = ("int8", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64", "bool")
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX")


class ScriptName(str):
    """A script name; unpickling one (in a runner child) imports this module."""

    __slots__ = ()


def values(rank: int, count: int, dtype: str, salt: int = 0) -> list:
    """Small rank-dependent values, exact in every dtype (products stay below 2**11)."""
    raw = [(i % 3) + rank + salt + 1 for i in range(count)]
    if dtype == "bool":
        return [(v + rank) % 2 == 0 for v in raw]
    if dtype.startswith("complex"):
        return [complex(v, v % 2) for v in raw]
    return raw


def states(bufs: Any) -> Any:
    return None if bufs is None else [state(b) for b in bufs]


def reprs(objects: Any) -> Any:
    """Objects as their repr (plain strings: the docs' {1: 2} has an int key)."""
    return None if objects is None else [repr(o) for o in objects]


# -- all_gather -------------------------------------------------------------------------------

def docs_all_gather(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' examples: int64 and cfloat, tensor_list of zeros."""
    out = {}
    tensor_list = [make([0, 0], "int64") for _ in range(n)]
    ret = dist.all_gather(tensor_list, make([1 + 2 * rank, 2 + 2 * rank], "int64"))
    out["int64"], out["returned"] = states(tensor_list), returned(ret)
    tensor_list = [make([0j, 0j], "complex64") for _ in range(n)]
    dist.all_gather(tensor_list, make([complex(1 + 2 * rank, 1 + 2 * rank),
                                       complex(2 + 2 * rank, 2 + 2 * rank)], "complex64"))
    out["cfloat"] = states(tensor_list)
    return out


def all_gather_dtypes(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    for dtype in DATA_DTYPES:
        tensor_list = [make(values(0, 3, dtype, 50), dtype) for _ in range(n)]
        dist.all_gather(tensor_list, make(values(rank, 3, dtype), dtype))
        out[dtype] = states(tensor_list)
    return out


def all_gather_into_tensor_flat(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    for count in (1, 5):
        output = make([0] * (n * count), "int32")
        work = dist.all_gather_into_tensor(output, make(values(rank, count, "int32"), "int32"),
                                           async_op=True)
        work.wait()
        out[f"count{count}"] = state(output)
    return out


# -- reduce, gather, scatter (every root) -------------------------------------------------------

def reduce_every_root(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Only the root's result is compared: gloo scribbles on the other ranks' tensors."""
    out = {}
    for root in range(n):
        for dtype in ("int64", "float32"):
            for op in REDUCE_OPS:
                t = make(values(rank, 4, dtype, root), dtype)
                ret = dist.reduce(t, dst=root, op=getattr(dist.ReduceOp, op))
                if rank == root:
                    out[f"root{root}-{dtype}-{op}"] = {"result": state(t), "returned": returned(ret)}
    return out


def gather_every_root(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    for root in range(n):
        gather_list = [make([0, 0, 0], "float64") for _ in range(n)] if rank == root else None
        ret = dist.gather(make(values(rank, 3, "float64", root), "float64"), gather_list, dst=root)
        out[f"root{root}"] = {"gather_list": states(gather_list), "returned": returned(ret)}
    return out


def scatter_every_root(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    for root in range(n):
        scatter_list = [make(values(r, 2, "int64", root), "int64") for r in range(n)] if rank == root else None
        t = make([0, 0], "int64")
        ret = dist.scatter(t, scatter_list, src=root)
        out[f"root{root}"] = {"tensor": state(t), "returned": returned(ret)}
    return out


# -- reduce_scatter -------------------------------------------------------------------------

def reduce_scatter_list(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    for dtype in ("int64", "float32"):
        for op in REDUCE_OPS:
            output = make([0, 0], dtype)
            inputs = [make(values(rank, 2, dtype, j), dtype) for j in range(n)]
            dist.reduce_scatter(output, inputs, op=getattr(dist.ReduceOp, op))
            out[f"{dtype}-{op}"] = {"output": state(output), "inputs": states(inputs)}
    return out


def reduce_scatter_uneven_list(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Block j has j + 1 elements (gloo accepts uneven reduce_scatter lists)."""
    output = make([0] * (rank + 1), "int64")
    dist.reduce_scatter(output, [make(values(rank, j + 1, "int64", j), "int64") for j in range(n)])
    return {"output": state(output)}


def reduce_scatter_tensor_ops(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    for op in REDUCE_OPS:
        output = make([0, 0, 0], "float64")
        data = make(values(rank, 3 * n, "float64"), "float64")
        ret = dist.reduce_scatter_tensor(output, data, op=getattr(dist.ReduceOp, op))
        out[op] = {"output": state(output), "input": state(data), "returned": returned(ret)}
    return out


# -- all_to_all -----------------------------------------------------------------------------

def docs_all_to_all_even(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' first example generalised to n ranks: arange(n) + rank·n, one element each."""
    inputs = [make([rank * n + j], "int64") for j in range(n)]
    outputs = [make([0], "int64") for _ in range(n)]
    ret = dist.all_to_all(outputs, inputs)
    cf_in = [make([complex(1 + j + n * rank, 1 + j + n * rank)], "complex64") for j in range(n)]
    cf_out = [make([0j], "complex64") for _ in range(n)]
    dist.all_to_all(cf_out, cf_in)
    return {"int64": states(outputs), "cfloat": states(cf_out), "returned": returned(ret)}


def all_to_all_single_splits(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Even rows (2-D, dim 0 split evenly), then uneven splits: rank r sends r + j + 1 rows to j."""
    even_out = make([[0, 0]] * (2 * n), "float32")
    dist.all_to_all_single(even_out, make([[rank, i] for i in range(2 * n)], "float32"))
    sends = [rank + j + 1 for j in range(n)]
    receives = [j + rank + 1 for j in range(n)]
    data = make([100 * rank + i for i in range(sum(sends))], "int64")
    uneven_out = make([0] * sum(receives), "int64")
    dist.all_to_all_single(uneven_out, data, receives, sends)
    return {"even": state(even_out), "uneven": state(uneven_out)}


def docs_all_to_all_single_uneven(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' uneven example (4 ranks) with all_to_all_single, which gloo accepts."""
    if n != 4:
        return {}
    out = make([0] * sum(DOCS_A2A_OUTPUT_SPLITS[rank]), "int64")
    dist.all_to_all_single(out, make(DOCS_A2A_INPUTS[rank], "int64"), DOCS_A2A_OUTPUT_SPLITS[rank],
                           DOCS_A2A_INPUT_SPLITS[rank])
    return {"output": state(out)}


# -- objects, p2p, barriers, groups ----------------------------------------------------------

def docs_object_collectives(dist: Any, rank: int, n: int, make: Make) -> dict:
    objects = list(DOCS_OBJECTS) if rank == 0 else [None, None, None]
    dist.broadcast_object_list(objects, src=0)
    gathered = [None] * n
    dist.all_gather_object(gathered, DOCS_OBJECTS[rank % 3])
    at_root = [None] * n if rank == n - 1 else None
    dist.gather_object({"rank": rank, "items": list(range(rank))}, at_root, dst=n - 1)
    output = [None]
    dist.scatter_object_list(output, [DOCS_OBJECTS[r % 3] for r in range(n)] if rank == 0 else None, src=0)
    return {"broadcast": reprs(objects), "all_gather": reprs(gathered), "gather": reprs(at_root),
            "scatter": reprs(output)}


def object_p2p(dist: Any, rank: int, n: int, make: Make) -> dict:
    if rank == 0:
        dist.send_object_list([{"a": 1}, "text", [1, 2, 3]], dst=n - 1)
        return {}
    if rank == n - 1:
        got = [None, None, None]
        sender = dist.recv_object_list(got, src=0)
        return {"got": reprs(got), "sender": sender}
    return {}


def batch_ring(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' batch_isend_irecv example: send to the right, receive from the left."""
    send = make([2 * rank, 2 * rank + 1], "float32")
    recv = make([0, 0], "float32")
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, (rank + 1) % n),
                                   dist.P2POp(dist.irecv, recv, (rank - 1 + n) % n)])
    for req in reqs:
        req.wait()
    return {"recv": state(recv), "requests": len(reqs)}


def monitored_barrier_ok(dist: Any, rank: int, n: int, make: Make) -> dict:
    ret = dist.monitored_barrier(wait_all_ranks=True)
    return {"returned": returned(ret)}


def subgroups_by_enumeration(dist: Any, rank: int, n: int, make: Make) -> dict:
    lists = [[r for r in range(n) if r % 2 == 0], [r for r in range(n) if r % 2 == 1]]
    mine, groups = dist.new_subgroups_by_enumeration(lists)
    t = make([rank], "int64")
    dist.all_reduce(t, group=mine)
    gathered = [make([0], "int64") for _ in range(dist.get_world_size(mine))]
    dist.all_gather(gathered, make([10 * rank], "int64"), group=mine)
    return {"sum": state(t), "gathered": states(gathered), "count": len(groups),
            "ranks": dist.get_process_group_ranks(mine)}


# -- accord only: what gloo rejects ---------------------------------------------------------

def uneven_all_gather(dist: Any, rank: int, n: int, make: Make) -> dict:
    """gloo: "invalid tensor size". Rank r contributes r + 1 elements."""
    tensor_list = [make([0] * (r + 1), "int64") for r in range(n)]
    dist.all_gather(tensor_list, make([10 * rank + i for i in range(rank + 1)], "int64"))
    return {"tensor_list": states(tensor_list)}


def stacked_all_gather_into_tensor(dist: Any, rank: int, n: int, make: Make) -> dict:
    """gloo wants a flat (n·k) output; accord also takes (n, k)."""
    output = make([[0, 0]] * n, "int64")
    dist.all_gather_into_tensor(output, make([rank, -rank], "int64"))
    return {"output": state(output)}


def docs_all_to_all_uneven_list(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' uneven example as lists (4 ranks); gloo: "invalid tensor size"."""
    if n != 4:
        return {}
    data = DOCS_A2A_INPUTS[rank]
    starts = [sum(DOCS_A2A_INPUT_SPLITS[rank][:j]) for j in range(4)]
    inputs = [make(data[s:s + k], "int64") for s, k in zip(starts, DOCS_A2A_INPUT_SPLITS[rank])]
    outputs = [make([0] * k, "int64") for k in DOCS_A2A_OUTPUT_SPLITS[rank]]
    dist.all_to_all(outputs, inputs)
    return {"output": states(outputs)}


def split_group_pairs(dist: Any, rank: int, n: int, make: Make) -> dict:
    """gloo: split_group needs a device-bound NCCL group."""
    group = dist.split_group(split_ranks=[[r, r + 1] for r in range(0, n - 1, 2)])
    if group is None:
        return {"group": None}
    t = make([rank + 1], "int64")
    dist.all_reduce(t, group=group)
    return {"group": dist.get_process_group_ranks(group), "sum": state(t)}


SCRIPTS: list[Script] = [
    Script("more_docs_all_gather", docs_all_gather),
    Script("more_all_gather_dtypes", all_gather_dtypes),
    Script("more_all_gather_into_tensor_flat", all_gather_into_tensor_flat),
    Script("more_reduce_every_root", reduce_every_root),
    Script("more_gather_every_root", gather_every_root),
    Script("more_scatter_every_root", scatter_every_root),
    Script("more_reduce_scatter_list", reduce_scatter_list),
    Script("more_reduce_scatter_uneven_list", reduce_scatter_uneven_list),
    Script("more_reduce_scatter_tensor_ops", reduce_scatter_tensor_ops),
    Script("more_docs_all_to_all_even", docs_all_to_all_even),
    Script("more_all_to_all_single_splits", all_to_all_single_splits),
    Script("more_docs_all_to_all_single_uneven", docs_all_to_all_single_uneven),
    Script("more_docs_object_collectives", docs_object_collectives),
    Script("more_object_p2p", object_p2p),
    Script("more_batch_ring", batch_ring),
    Script("more_monitored_barrier_ok", monitored_barrier_ok),
    Script("more_subgroups_by_enumeration", subgroups_by_enumeration),
    # accord only
    Script("more_uneven_all_gather", uneven_all_gather, on_gloo=False),
    Script("more_stacked_all_gather_into_tensor", stacked_all_gather_into_tensor, on_gloo=False),
    Script("more_docs_all_to_all_uneven_list", docs_all_to_all_uneven_list, on_gloo=False),
    Script("more_split_group_pairs", split_group_pairs, on_gloo=False),
]
BY_NAME = {s.name: s for s in SCRIPTS}
assert len(BY_NAME) == len(SCRIPTS), "script names must be unique"
assert not BY_NAME.keys() & {s.name for s in scripts.SCRIPTS}, "names clash with scripts.py"
scripts.BY_NAME.update(BY_NAME)  # the runner's children look names up there


def names_for(on_torch_gloo: bool, torch_tensors: bool) -> list[str]:
    """The scripts one implementation runs, in order, as ScriptName (see the docstring)."""
    return [ScriptName(s.name) for s in SCRIPTS
            if (s.on_gloo or not on_torch_gloo) and (torch_tensors or not s.needs_torch)]
