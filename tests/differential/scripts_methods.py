"""SPMD scripts for torch's method-level API (``pg.allreduce([t], opts)``…), the coalesced
calls, torch's private look-ups and the ``*_multigpu`` collectives.

Same contract as ``scripts`` (``fn(dist, rank, world_size, make) -> dict`` of plain data, run
unchanged on torch.distributed with gloo and on accord). torch 2.13 has no ``*_multigpu``
functions: there the scripts do the same reduction with torch's single-tensor collectives
(the reference: each list element a device of its own, device x = rank × list length + j).
This module must not import torch.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import scripts
from .scripts import Make, Script, state

DEVICES = 2


class ScriptName(str):
    """A script name; unpickling one (in a runner child) imports this module."""

    __slots__ = ()


def _default_group(dist: Any) -> Any:
    return getattr(dist, "distributed_c10d", dist)._get_default_group()


def _v(xs: Any) -> Any:
    return [state(x) for x in xs]


def methods(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The method-level collectives with torch's options and overloads; a Work always."""
    pg = _default_group(dist)
    out: dict[str, Any] = {"name": [pg.group_name, pg.group_desc, pg.size(), pg.rank(),
                                    dist._get_process_group_name(pg)]}
    x = make([rank + 1, 1], "int64")
    work = pg.allreduce([x])
    out["work"] = type(work).__name__
    work.wait()
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    y = make([rank, -rank], "float32")
    pg.allreduce([y], opts).wait()
    b = make([rank * 10], "int32")
    bopts = dist.BroadcastOptions()
    bopts.rootRank = n - 1
    pg.broadcast([b], bopts).wait()
    r = make([rank + 1.0], "float64")
    ropts = dist.ReduceOptions()
    ropts.rootRank = 0
    pg.reduce([r], ropts).wait()
    outs = [make([0, 0], "int64") for _ in range(n)]
    pg.allgather([outs], [make([rank, 2 * rank], "int64")]).wait()
    rs = make([0], "int64")
    rsopts = dist.ReduceScatterOptions()
    pg.reduce_scatter([rs], [[make([rank + j], "int64") for j in range(n)]], rsopts).wait()
    a2a = make([0] * n, "int64")
    pg.alltoall_base(a2a, make([10 * rank + j for j in range(n)], "int64"), [], [],
                     dist.AllToAllOptions()).wait()
    pg.barrier(dist.BarrierOptions()).wait()
    right, left = (rank + 1) % n, (rank - 1) % n
    box = make([0, 0], "int64")
    if n > 1:
        send = pg.send([make([rank, 7], "int64")], right, 3)
        pg.recv([box], left, 3).wait()
        send.wait()
    cut = [make([rank + 1.0], "float32"), make([2.0, rank], "float32")]  # (gloo: one dtype)
    cut_opts = dist.AllreduceCoalescedOptions()
    pg.allreduce_coalesced(cut, cut_opts).wait()
    out.update(x=state(x), y=state(y), b=state(b), r=state(r) if rank == 0 else None, outs=_v(outs),
               rs=state(rs), a2a=state(a2a), box=state(box), coalesced=_v(cut))
    return out


def coalesced(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The deprecated coalesced functions and the coalescing manager, as libraries call them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        tensors = [make([rank + 1, 1], "int64"), make([rank * 2], "int64")]
        dist.all_reduce_coalesced(tensors)
        lists = [[make([0], "int64"), make([0, 0], "int64")] for _ in range(n)]
        dist.all_gather_coalesced(lists, [make([rank], "int64"), make([rank, -rank], "int64")])
    buckets = [make([rank, 1], "float32"), make([10 * rank], "float32")]
    with dist._coalescing_manager(async_ops=True) as cm:
        for bucket in buckets:
            dist.all_reduce(bucket, async_op=True)
    cm.wait()
    gathered = make([0] * n, "int64")
    dist._all_gather_base(gathered, make([rank + 3], "int64"))
    rsb = make([0], "int64")
    dist._reduce_scatter_base(rsb, make([rank + j for j in range(n)], "int64"))
    return {"tensors": _v(tensors), "lists": [_v(each) for each in lists], "buckets": _v(buckets),
            "gathered": state(gathered), "rsb": state(rsb), "not_in": dist._rank_not_in_group(None)}


def _has_multigpu(dist: Any) -> bool:
    return hasattr(dist, "all_reduce_multigpu")


def _reference_all_reduce(dist: Any, tensor_list: list, op: Any) -> None:
    """The same reduction with one tensor per rank (torch on gloo): combine, all_reduce, copy."""
    torch = __import__("sys").modules["torch"]
    fold = {"SUM": torch.add, "MAX": torch.maximum, "MIN": torch.minimum, "PRODUCT": torch.mul}
    name = str(op).split(".")[-1]
    acc = tensor_list[0].clone()
    for t in tensor_list[1:]:
        fold[name](acc, t, out=acc)
    dist.all_reduce(acc, op)
    for t in tensor_list:
        t.copy_(acc)


def multigpu(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The five *_multigpu calls (accord) or their single-tensor reference (torch on gloo)."""
    d, world = DEVICES, n * DEVICES
    out: dict[str, Any] = {}
    for op_name in ("SUM", "MAX", "PRODUCT"):
        op = getattr(dist.ReduceOp, op_name)
        tl = [make([(rank * d + j) % 3 + 1, 1], "int64") for j in range(d)]
        if _has_multigpu(dist):
            dist.all_reduce_multigpu(tl, op)
        else:
            _reference_all_reduce(dist, tl, op)
        out[f"all_reduce_{op_name}"] = _v(tl)
    bl = [make([rank * 10 + j], "float32") for j in range(d)]
    if _has_multigpu(dist):
        dist.broadcast_multigpu(bl, src=n - 1, src_tensor=1)
    else:
        dist.broadcast(bl[1] if rank == n - 1 else bl[0], src=n - 1)
        for t in bl:
            t.copy_(bl[1] if rank == n - 1 else bl[0])
    out["broadcast"] = _v(bl)
    rl = [make([rank * d + j + 1], "int32") for j in range(d)]
    if _has_multigpu(dist):
        dist.reduce_multigpu(rl, dst=0, dst_tensor=1)
    else:
        acc = rl[0] + rl[1]
        dist.reduce(acc, dst=0)
        if rank == 0:
            rl[1].copy_(acc)
    out["reduce"] = _v(rl)
    outs = [[make([0, 0], "int64") for _ in range(world)] for _ in range(d)]
    ins = [make([rank * d + j, -1], "int64") for j in range(d)]
    if _has_multigpu(dist):
        dist.all_gather_multigpu(outs, ins)
    else:
        for x in range(world):  # device x's input, from its rank, into every output list
            k, j = divmod(x, d)
            carrier = ins[j].clone() if rank == k else make([0, 0], "int64")
            dist.broadcast(carrier, src=k)
            for each in outs:
                each[x].copy_(carrier)
    out["all_gather"] = [_v(each) for each in outs]
    rs = [make([0.0], "float64") for _ in range(d)]
    rins = [[make([float(x * (i + 1) + rank)], "float64") for x in range(world)] for i in range(d)]
    if _has_multigpu(dist):
        dist.reduce_scatter_multigpu(rs, rins)
    else:
        for x in range(world):
            acc = rins[0][x] + rins[1][x]
            dist.all_reduce(acc)
            k, j = divmod(x, d)
            if k == rank:
                rs[j].copy_(acc)
    out["reduce_scatter"] = _v(rs)
    return out


SCRIPTS: list[Script] = [
    Script("methods_pg", methods),
    Script("methods_coalesced", coalesced),
    Script("methods_multigpu", multigpu),
]
BY_NAME = {s.name: s for s in SCRIPTS}
assert not BY_NAME.keys() & set(scripts.BY_NAME), "names clash with other script modules"
scripts.BY_NAME.update(BY_NAME)  # the runner's children look names up there


def names_for(on_torch_gloo: bool, torch_tensors: bool) -> list[str]:
    return [ScriptName(s.name) for s in SCRIPTS
            if (s.on_gloo or not on_torch_gloo) and (torch_tensors or not s.needs_torch)]
