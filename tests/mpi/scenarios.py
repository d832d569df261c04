"""Programs for the backend "mpi" tests, each run by ``mpiexec -n N python -m
mpi.scenarios NAME`` (tests/ on PYTHONPATH). Every rank writes one JSON document
with what it saw into ``$ACCORD_TEST_OUT/rank<N>.json``; the tests read those (and the job's
exit code and stderr). ``NAME1+NAME2+…`` runs several in one job, one after another: the
document is then {name: what that one saw}.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any, Callable

import numpy as np

import accord as dist

SCENARIOS: dict[str, Callable[[int, int], Any]] = {}


def scenario(fn: Callable[[int, int], Any]) -> Callable[[int, int], Any]:
    SCENARIOS[fn.__name__] = fn
    return fn


def failure(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


@scenario
def basics(rank: int, n: int) -> Any:
    """Who MPI says we are, and what the API reports."""
    return {"rank": dist.get_rank(), "size": dist.get_world_size(), "backend": str(dist.get_backend()),
            "initialized": dist.is_initialized(), "mpi": dist.is_mpi_available()}


@scenario
def reductions(rank: int, n: int) -> Any:
    """Every op on every dtype MPI reduces natively or through accord's kernel."""
    out: dict[str, Any] = {}
    for dtype in ("int8", "uint8", "int32", "int64", "uint64", "float16", "float32", "float64",
                  "complex64", "bool"):
        ops = ["SUM", "PRODUCT", "MIN", "MAX"] if dtype != "complex64" else ["SUM"]
        if dtype.startswith(("int", "uint", "bool")):
            ops += ["BAND", "BOR", "BXOR"]
        if dtype != "bool":
            ops += ["AVG"]
        for op in ops:
            x = (np.arange(5) % 2 == rank % 2) if dtype == "bool" else (np.arange(5) + rank + 1).astype(dtype)
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            out[f"{dtype}-{op}"] = x.tolist() if dtype != "complex64" else [str(v) for v in x]
    x = np.full(3, float(rank + 1), np.float64)
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0))
    out["premul_sum"] = x.tolist()
    big = np.full(3_000_000, rank + 1, np.float16)  # MPI cuts it in segments: on element bounds
    dist.all_reduce(big)
    out["float16-big"] = [float(big.min()), float(big.max())]
    return out


@scenario
def torch_tensors(rank: int, n: int) -> Any:
    import torch
    out = {}
    t = torch.arange(4, dtype=torch.bfloat16) + rank
    dist.all_reduce(t)
    out["bf16"] = t.float().tolist()
    s = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1] + rank  # a strided view
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    out["strided"] = s.tolist()
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outs, torch.full((2,), rank, dtype=torch.int64))
    out["gather"] = [o.tolist() for o in outs]
    return out


@scenario
def lists(rank: int, n: int) -> Any:
    """List forms with separate and uneven arrays, and the tensor forms, every root."""
    out: dict[str, Any] = {}
    outs = [np.zeros(i + 1, np.int32) for i in range(n)]
    dist.all_gather(outs, np.full(rank + 1, rank, np.int32))
    out["all_gather_uneven"] = [o.tolist() for o in outs]
    into = np.zeros(2 * n, np.int64)
    dist.all_gather_into_tensor(into, np.array([rank, 10 * rank], np.int64))
    out["all_gather_into_tensor"] = into.tolist()
    res = np.zeros(rank + 2, np.int64)
    dist.reduce_scatter(res, [np.full(j + 2, rank + j, np.int64) for j in range(n)])
    out["reduce_scatter_uneven"] = res.tolist()
    one = np.zeros(2, np.float32)
    dist.reduce_scatter_tensor(one, np.arange(2 * n, dtype=np.float32) + rank, op=dist.ReduceOp.AVG)
    out["reduce_scatter_tensor_avg"] = one.tolist()
    sends = [np.full(rank + j + 1, 100 * rank + j, np.int64) for j in range(n)]
    recvs = [np.zeros(j + rank + 1, np.int64) for j in range(n)]
    dist.all_to_all(recvs, sends)
    out["all_to_all_uneven"] = [r.tolist() for r in recvs]
    inp = np.arange(sum(range(1, n + 1)), dtype=np.int64) + 1000 * rank
    splits_in = list(range(1, n + 1))
    splits_out = [rank + 1] * n
    got = np.zeros(sum(splits_out), np.int64)
    dist.all_to_all_single(got, inp, splits_out, splits_in)
    out["all_to_all_single_uneven"] = got.tolist()
    again = np.zeros_like(got)  # the split sizes as arrays (their truth is ambiguous: not asked)
    dist.all_to_all_single(again, inp, np.array(splits_out), np.array(splits_in))
    out["all_to_all_single_uneven_arrays"] = again.tolist()
    for root in range(n):
        g = [np.zeros(2, np.int16) for _ in range(n)] if rank == root else None
        dist.gather(np.full(2, rank, np.int16), g, dst=root)
        s = np.zeros(3, np.uint8)
        dist.scatter(s, [np.full(3, 7 * j, np.uint8) for j in range(n)] if rank == root else None, src=root)
        r = np.full(2, rank + 1, np.int64)
        dist.reduce(r, dst=root, op=dist.ReduceOp.PRODUCT)
        b = np.full(4, rank, np.float64)
        dist.broadcast(b, src=root)
        out[f"root{root}"] = {"gather": [x.tolist() for x in g] if g else None, "scatter": s.tolist(),
                              "reduce": r.tolist(), "broadcast": b.tolist()}
    empty = np.zeros(0, np.float32)
    dist.all_reduce(empty)
    dist.broadcast(empty, src=0)
    out["empty"] = True
    return out


@scenario
def carried(rank: int, n: int) -> Any:
    """Small all_reduce, broadcast and barrier ride on the check (one MPI call). Every path
    must decide the same: ranks on the short path (NumPy), the long path (torch tensors,
    strided views) and async calls meet in one call; sizes on both sides of the limit."""
    import torch
    out: dict[str, Any] = {}
    from accord.engines.mpi import agreement
    limit = agreement.CARRY_BYTES
    for dtype, itemsize in (("int8", 1), ("int32", 4), ("float64", 8), ("complex64", 8)):
        for nbytes in (0, itemsize, limit, limit + itemsize, 4 * limit):
            count = nbytes // itemsize
            values = (np.arange(count) + rank + 1).astype(dtype)
            kind = ("numpy", "torch", "strided", "async")[(rank + count) % 4]
            if kind == "torch" and dtype != "complex64":
                t = torch.from_numpy(values.copy())
                dist.all_reduce(t)
                got = t.numpy()
            elif kind == "strided":
                wide = np.zeros((max(count, 1), 2), dtype)
                wide[:count, 0] = values
                view = wide[:count, 0]
                dist.all_reduce(view)
                got = view
            elif kind == "async":
                got = values
                dist.all_reduce(got, async_op=True).wait()
            else:
                got = values
                dist.all_reduce(got)
            out[f"all_reduce-{dtype}-{nbytes}"] = [str(v) for v in got]
            for root in range(n):
                b = np.full(count, rank * 10 + root, dtype)
                if (rank + root) % 2:
                    dist.broadcast(b, src=root)
                else:
                    dist.broadcast(b, src=root, async_op=True).wait()
                out[f"broadcast-{dtype}-{nbytes}-{root}"] = [str(v) for v in b]
    for op in ("MAX", "AVG", "BXOR", "PRODUCT"):
        x = np.array([rank + 1, 2 * rank + 1], np.int64)
        dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
        out[op] = x.tolist()
    p = np.full(2, rank + 1.0)
    dist.all_reduce(p, op=dist._make_nccl_premul_sum(3.0))
    out["premul_sum"] = p.tolist()
    bf = torch.arange(3, dtype=torch.bfloat16) + rank
    dist.all_reduce(bf)
    out["bf16"] = bf.float().tolist()
    # ranks that disagree, one of them carrying data: an error everywhere, and the group goes on
    out["mismatch"] = None
    try:
        if not dist.group.WORLD.engine.checks:  # (MPI itself would hang)
            pass
        elif rank == 0:
            dist.all_reduce(np.ones(2, np.float32))
        else:
            dist.barrier()
    except dist.CollectiveMismatchError as exc:
        out["mismatch"] = failure(exc)
    for _ in range(3):
        dist.barrier()
    y = np.ones(3, np.int16)
    dist.all_reduce(y)
    out["after"] = y.tolist()
    out["checks"] = dist.group.WORLD.engine.checks
    from accord.engines.mpi import runtime
    from accord.reduce_ops import as_reduce_op, make_kernel
    kernel = make_kernel(as_reduce_op(dist.ReduceOp.SUM), np.dtype(np.int8), "int8")
    out["int8_sum_on_mpi_sum"] = runtime.reduction(np.zeros(32, np.int8), kernel)[1] == runtime.load().SUM
    return out


@scenario
def others_mixed(rank: int, n: int) -> Any:
    """reduce, gather, scatter and the tensor forms of all_gather, reduce_scatter and
    all_to_all, each rank on its own path: the short path (NumPy), the long path (torch
    tensors) or async; small and large; an input that is a view of the output; AVG."""
    import torch
    out: dict[str, Any] = {}

    def call(kind: str, fn: Callable[..., Any], *arrays: Any, **kw: Any) -> list[Any]:
        """``fn`` on ``arrays`` (NumPy) as ``kind`` says; the arrays' values afterwards."""
        if kind == "torch":
            tensors = [None if a is None else [torch.from_numpy(x) for x in a] if isinstance(a, list)
                       else torch.from_numpy(a) for a in arrays]
            fn(*tensors, **kw)
        elif kind == "async":
            fn(*arrays, async_op=True, **kw).wait()
        else:
            fn(*arrays, **kw)
        return [None if a is None else [x.tolist() for x in a] if isinstance(a, list) else a.tolist()
                for a in arrays]

    for count in (1, 3, 20_000):  # 80 KB blocks: gather and scatter by MPI's v-forms
        for root in range(n):
            kind = ("numpy", "torch", "async")[(rank + root + count) % 3]
            key = f"{count}-{root}"
            out[f"reduce-{key}"] = call(kind, dist.reduce, np.full(count, rank + 1, np.int64), dst=root)
            out[f"reduce_avg-{key}"] = call(kind, dist.reduce, np.full(count, rank + 1.0), dst=root,
                                            op=dist.ReduceOp.AVG)
            listed = [np.zeros(count, np.int32) for _ in range(n)] if rank == root else None
            out[f"gather-{key}"] = call(kind, dist.gather, np.full(count, rank, np.int32), listed, dst=root)
            listed = [np.full(count, 10 * j + root, np.int32) for j in range(n)] if rank == root else None
            out[f"scatter-{key}"] = call(kind, dist.scatter, np.zeros(count, np.int32), listed, src=root)
        kind = ("numpy", "torch", "async")[(rank + count) % 3]
        out[f"all_gather_into_tensor-{count}"] = call(
            kind, dist.all_gather_into_tensor, np.zeros(n * count, np.float32), np.full(count, rank, np.float32))
        out[f"reduce_scatter_tensor-{count}"] = call(
            kind, dist.reduce_scatter_tensor, np.zeros(count, np.float64),
            np.arange(n * count, dtype=np.float64) + rank, op=dist.ReduceOp.AVG)
        out[f"all_to_all_single-{count}"] = call(
            kind, dist.all_to_all_single, np.zeros((n, count), np.int64),
            (np.arange(n * count, dtype=np.int64) + 1000 * rank).reshape(n, count))
        # the list form: its short path (NumPy, torch), the long path (async), and a rank
        # whose input is its own output (in place: the long path) meet in one MPI call
        listed = [np.zeros(count, np.float32) for _ in range(n)]
        if (rank + count) % 4 == 3:
            listed[rank][...] = rank
            dist.all_gather(listed, listed[rank])
            out[f"all_gather_list-{count}"] = [[x.tolist() for x in listed], listed[rank].tolist()]
        else:
            out[f"all_gather_list-{count}"] = call(
                kind, dist.all_gather, listed, np.full(count, rank, np.float32))
    # the list form's large blocks, uneven (rank r gives 20 000 + 7r elements) and 2-D
    uneven = [np.zeros(20_000 + 7 * r, np.float32) for r in range(n)]
    out["all_gather_list_uneven"] = call(("numpy", "async")[rank % 2], dist.all_gather, uneven,
                                         np.full(20_000 + 7 * rank, rank + 0.5, np.float32))
    shaped = [np.zeros((100, 200), np.int64) for _ in range(n)]
    out["all_gather_list_2d"] = call(("torch", "numpy")[rank % 2], dist.all_gather, shaped,
                                     np.arange(20_000, dtype=np.int64).reshape(100, 200) + 10**6 * rank)
    whole = np.zeros(2 * n, np.int64)  # the input is this rank's piece of the output (torch allows it)
    whole[2 * rank:2 * rank + 2] = rank + 5
    dist.all_gather_into_tensor(whole, whole[2 * rank:2 * rank + 2])
    out["in_place_all_gather"] = whole.tolist()
    # large blocks where the root's arrays overlap each other or its own tensor: copied
    block = 20_000
    shared = np.full(block, 3, np.int32)
    got = np.zeros(block, np.int32)
    dist.scatter(got, [shared] * n if rank == 0 else None, src=0)
    out["scatter_one_array_twice"] = int(got.sum())
    mine = np.full(block, rank + 1, np.int32)
    listed = [mine] + [np.zeros(block, np.int32) for _ in range(n - 1)] if rank == 0 else None
    dist.gather(mine, listed, dst=0)
    out["gather_into_own_tensor"] = [int(a.sum()) for a in listed] if listed else None
    try:  # rank 0 gathers where the others scatter, all on the short path: an error everywhere
        if not dist.group.WORLD.engine.checks:  # (MPI itself would hang)
            pass
        elif rank == 0:
            dist.gather(np.ones(2, np.float32), [np.zeros(2, np.float32) for _ in range(n)], dst=0)
        else:
            dist.scatter(np.zeros(2, np.float32), None, src=0)
        out["mismatch"] = None
    except dist.CollectiveMismatchError as exc:
        out["mismatch"] = failure(exc)
    after = np.full(2, rank, np.int64)
    dist.reduce(after, dst=0)
    out["after"] = after.tolist()
    return out


@scenario
def async_many(rank: int, n: int) -> Any:
    """Several async calls in flight at once, then their Works; their buffers stay theirs."""
    arrays = [np.full(1000 * (i + 1), rank + i, np.int64) for i in range(6)]
    works = [dist.all_reduce(a, async_op=True) for a in arrays]
    lists = [np.zeros(3, np.int64) for _ in range(n)]
    works.append(dist.all_gather(lists, np.full(3, rank, np.int64), async_op=True))
    b = np.full(5, rank, np.int32)
    works.append(dist.broadcast(b, src=n - 1, async_op=True))
    polled = [w.is_completed() for w in works]
    for w in works:
        w.wait()
    return {"sums": [int(a[0]) for a in arrays], "lists": [x.tolist() for x in lists],
            "bcast": b.tolist(), "all_done": all(w.is_completed() for w in works),
            "polled_type": all(isinstance(p, bool) for p in polled),
            "future": dist.all_reduce(np.ones(2), async_op=True).get_future().wait()[0].tolist()}


@scenario
def async_then_messages(rank: int, n: int) -> Any:
    """An async collective returns before the other ranks reach it, as torch's do: the
    caller may first send what a peer receives before that peer's call (before, its check
    waited in the caller: a deadlock until the timeout), or wait for a message a peer sends
    only after its own call of it has finished (the group's starter starts the call); then
    blocking calls, a new group and more async calls keep every rank's calls in order."""
    out: dict[str, Any] = {}
    x = np.full(3, rank + 1.0)
    if rank == 0:
        work = dist.all_reduce(x, async_op=True)
        dist.send(np.full(1, 7.0), dst=1)
        work.wait()
    else:
        got = np.zeros(1)
        if rank == 1:
            dist.recv(got, src=0)
        dist.all_reduce(x)
    out["sent_first"] = x.tolist()
    big = np.full(20_000, float(rank))  # (not carried by the check: a second MPI call)
    if rank == 0:
        work = dist.all_reduce(big, async_op=True)
        note = np.zeros(1)
        dist.recv(note, src=1)  # rank 1 sends it after its all_reduce finished
        work.wait()
        out["note"] = note.tolist()
    else:
        dist.all_reduce(big)
        if rank == 1:
            dist.send(np.full(1, 9.0), dst=0)
    out["received_after"] = [float(big.min()), float(big.max())]
    works = [dist.all_reduce(np.full(2, float(rank + i)), async_op=True) for i in range(3)]
    mid = np.full(2, 1.0)
    dist.all_reduce(mid)  # starts after the three async calls, on every rank
    sub = dist.new_group(list(range(n)))
    last = dist.broadcast(np.full(2, float(rank)), src=n - 1, group=sub, async_op=True)
    for w in works + [last]:
        w.wait()
    out["in_order"] = [mid.tolist(), [w.result()[0].tolist() for w in works], last.result()[0].tolist()]
    import threading
    time.sleep(1.3)  # the groups' starter threads end after a second without async calls
    out["starters"] = [t.name for t in threading.enumerate() if t.name.endswith("-start")]
    return out


@scenario
def future_callbacks(rank: int, n: int) -> Any:
    """An async call whose Future is asked for completes without anybody waiting for it (as
    DDP's reducer does: it waits on the torch Future in C++): its callbacks run, a ``then``
    chain completes, and a later call's Future too, in order."""
    import threading

    seen: list[Any] = []
    done = threading.Event()
    x = np.full(4, rank + 1.0)
    work = dist.all_reduce(x, async_op=True)
    future = work.get_future()
    future.add_done_callback(lambda f: (seen.append(f.value()[0].tolist()), done.set()))
    chained = dist.all_reduce(np.full(2, float(rank)), async_op=True).get_future().then(
        lambda f: f.value()[0].sum()
    )
    arrived = done.wait(10)  # nobody calls work.wait(): the completer must finish it
    waited = threading.Event()
    chained.add_done_callback(lambda f: waited.set())
    return {"callback_ran": arrived, "seen": seen, "chained": float(chained.wait()) if waited.wait(10) else None,
            "completed": work.is_completed()}


@scenario
def ddp(rank: int, n: int) -> Any:
    """torch's DDP on backend mpi (accord's MPI world is torch's default group): small buckets,
    so several all_reduces overlap with backward and DDP waits on their Futures in C++. Each
    rank checks the result against the same steps done by hand (the ranks' gradients
    averaged)."""
    import torch
    import torch.distributed as tdist

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 64))

    def batch(r: int, step: int) -> torch.Tensor:
        return torch.arange(8 * 256, dtype=torch.float32).reshape(8, 256).sin() * (r + 1) + step

    net = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=0.25)  # 1.3 MB of parameters
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    def all_reduces() -> int:
        return int(dist.comm_stats()["0"].get("all_reduce", {}).get("calls", 0))

    before = all_reduces()
    for step in range(3):
        opt.zero_grad()
        net(batch(rank, step)).pow(2).mean().backward()
        opt.step()
        ref_opt.zero_grad()
        for r in range(n):
            (ref(batch(r, step)).pow(2).mean() / n).backward()
        ref_opt.step()
    gap = max(float((a - b).abs().max()) for a, b in zip(net.module.parameters(), ref.parameters()))
    return {"default_group": tdist.is_initialized() and tdist.get_backend() == "accord",
            "gap": gap, "all_reduces": all_reduces() - before}


@scenario
def point_to_point(rank: int, n: int) -> Any:
    out: dict[str, Any] = {}
    right, left = (rank + 1) % n, (rank - 1) % n
    got = np.zeros(4, np.float64)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(4, rank, np.float64), right, tag=3),
                                   dist.P2POp(dist.irecv, got, left, tag=3)])
    for r in reqs:
        r.wait()
    out["ring"] = got.tolist()
    if rank == 0:
        senders = []
        for _ in range(n - 1):
            buf = np.zeros(2, np.int64)
            senders.append(dist.recv(buf, tag=9))
            assert buf[0] == senders[-1]
        out["any_source"] = sorted(senders)
        w = dist.irecv(np.zeros(1), tag=11)
        w.wait()
        out["irecv_source"] = w.source_rank() if hasattr(w, "source_rank") else None
    else:
        dist.send(np.full(2, rank, np.int64), dst=0, tag=9)
        if rank == 1:
            dist.isend(np.ones(1), dst=0, tag=11).wait()
    if n >= 2 and rank in (0, 1):
        objs = [None, None]
        if rank == 0:
            dist.send_object_list([{"a": rank}, np.arange(3)], dst=1)
        else:
            out["object_src"] = dist.recv_object_list(objs, src=0)
            out["objects"] = [objs[0], objs[1].tolist()]
    return out


@scenario
def groups(rank: int, n: int) -> Any:
    out: dict[str, Any] = {}
    evens = dist.new_group([r for r in range(n) if r % 2 == 0])
    if rank % 2 == 0:
        x = np.array([rank], np.int64)
        dist.all_reduce(x, group=evens)
        out["evens"] = int(x[0])
        out["evens_rank"] = dist.get_rank(evens)
    else:
        out["evens"] = evens == dist.GroupMember.NON_GROUP_MEMBER
    mine, _ = dist.new_subgroups(group_size=2) if n % 2 == 0 else (None, None)
    if mine is not None:
        y = np.array([rank], np.int64)
        dist.all_reduce(y, group=mine)
        out["pairs"] = int(y[0])
        dist.destroy_process_group(mine)
    half = (n + 1) // 2
    split = dist.split_group(split_ranks=[[r for r in range(n) if r < half],
                                          [r for r in range(n) if r >= half]])
    if split is not None:
        z = np.array([1], np.int64)
        dist.all_reduce(z, group=split)
        out["split"] = [int(z[0]), dist.get_process_group_ranks(split)]
    try:  # MPI cannot leave a rank out (no ULFM): a clear error, on every rank, nothing sent
        dist.shrink_group([n - 1])
        out["shrink"] = "shrunk"
    except Exception as exc:  # noqa: BLE001 — described for the test
        out["shrink"] = failure(exc)
    return out


@scenario
def mismatch(rank: int, n: int) -> Any:
    """Rank 0 calls broadcast where the others call all_reduce: everyone gets an error that
    shows each rank's call, nothing hangs, and the group still works afterwards."""
    x = np.ones(4, np.float32)
    try:
        if rank == 0:
            dist.broadcast(x, src=0)
        else:
            dist.all_reduce(x)
        seen = None
    except dist.CollectiveMismatchError as exc:
        seen = failure(exc)
    y = np.ones(2, np.int64)
    dist.all_reduce(y)
    try:  # object collectives too: their frames on MPI carry no fingerprint of their own
        if rank == 0:
            dist.all_gather_object([None] * n, {"rank": rank})
        else:
            dist.broadcast_object_list([{"from": rank}], src=n - 1)
        objects = None
    except dist.CollectiveMismatchError as exc:
        objects = failure(exc)
    gathered: list[Any] = [None] * n
    dist.all_gather_object(gathered, rank)
    return {"error": seen, "after": y.tolist(), "objects": objects, "gathered": gathered}


@scenario
def stuck(rank: int, n: int) -> Any:
    """The last rank does not call the all_reduce: the others time out naming it. It stays
    out until they have written their results (or 30 s pass), not for a fixed sleep."""
    dist.barrier()
    if rank == n - 1:
        out, deadline = os.environ["ACCORD_TEST_OUT"], time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(out, f"rank{r}.json")) for r in range(n - 1)):
            time.sleep(0.05)
        return {"skipped": True}
    started = time.monotonic()
    try:
        if os.environ.get("ACCORD_TEST_STUCK_OP") == "gather":  # direct_rooted_exchanges' short path
            dist.gather(np.ones(2), [np.zeros(2) for _ in range(n)] if rank == 0 else None, dst=0)
        else:
            dist.all_reduce(np.ones(2), async_op=False)
        return {"error": None}
    except dist.DistTimeoutError as exc:
        return {"error": failure(exc), "after_s": time.monotonic() - started,
                "broken": dist.group.WORLD.is_broken()}


@scenario
def uncaught(rank: int, n: int) -> Any:
    """Rank 1 raises; the others wait in a collective (the job must end, not hang)."""
    dist.barrier()
    if rank == 1:
        raise RuntimeError("rank 1 gives up")
    dist.all_reduce(np.ones(2))
    return {"error": None}


@scenario
def killed(rank: int, n: int) -> Any:
    """Rank 1 dies of SIGKILL in the middle of the job."""
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(np.ones(2))
    return {"error": None}


@scenario
def refused_then_groups(rank: int, n: int) -> Any:
    """The root leaves gather_object by an error while the others send anyway (its list is
    short; then its own object does not pickle): at destroy the root keeps those groups'
    communicators (a message may still come: MPI would hand it to the next communicator on
    the same context). A group that saw no error is freed, even one made before the errors;
    the groups made after give the right data."""
    from mpi4py import MPI
    healthy = dist.new_group()
    refusing = dist.new_group(timeout=timedelta(seconds=2))
    unpicklable = dist.new_group(timeout=timedelta(seconds=2))
    raised = []
    for group, obj, short in ((unpicklable, (lambda: 0) if rank == 0 else "y", False), (refusing, "x", True)):
        try:
            dist.gather_object(obj, ([None] * (n - 1 if short else n)) if rank == 0 else None, dst=0,
                               group=group)
        except Exception as exc:  # noqa: BLE001 — which error it was is the result
            raised.append(type(exc).__name__)
        dist.destroy_process_group(group)  # (the first before the second call raises)
    dist.all_reduce(np.ones(1), group=healthy)
    dist.destroy_process_group(healthy)
    sums = []
    for members in ([0], list(range(n))):
        g = dist.new_group(members)
        if rank in members:
            x = np.full(4, rank + 1.0)
            dist.all_reduce(x, group=g)
            sums.append(x.tolist())
    return {"raised": raised, "kept": [g.engine.comm != MPI.COMM_NULL for g in (refusing, unpicklable)],
            "healthy_freed": healthy.engine.comm == MPI.COMM_NULL, "sums": sums}


@scenario
def stores_alongside(rank: int, n: int) -> Any:
    """The user's own stores work beside backend mpi; the flight recorder records its calls."""
    path = os.environ["ACCORD_TEST_FILESTORE"]
    store = dist.FileStore(path, n)
    store.set(f"k{rank}", str(rank))
    store.wait([f"k{r}" for r in range(n)], timedelta(seconds=20))
    values = sorted(store.get(f"k{r}").decode() for r in range(n))
    dist.all_reduce(np.ones(2))
    for _ in range(3):  # the short path's carried broadcast: its calls and bytes counted
        dist.broadcast(np.ones(3, dtype=np.float32), 0)
    dump = dist.dump_flight_recorder(os.path.join(os.environ["ACCORD_TEST_DUMPS"], f"rank{rank}.json"))
    with open(dump) as f:
        recorded = [(c["op"], c["state"]) for g in json.load(f)["groups"] for c in g["entries"]]
    stats = dist.comm_stats()["0"]
    world = dist.group.WORLD  # what the progress board and a peer's stuck report read
    return {"values": values, "recorded": recorded, "stats_ops": sorted(stats),
            "counted": {op: (s["calls"], s["bytes"]) for op, s in stats.items()},
            "last_done": (world.recorder.progress()["last_done"] or {}).get("seq"),
            "last_seq": world.last_seq}


@scenario
def with_nccl(rank: int, n: int) -> Any:
    """"cpu:mpi,cuda:nccl" (torch's gloo standing in for NCCL): torch tensors go to the device
    group, NumPy arrays to MPI."""
    import torch
    t = torch.full((2,), float(rank + 1))
    dist.all_reduce(t)
    a = np.full(2, rank + 1.0)
    dist.all_reduce(a)
    group = dist.new_group(list(range(n)))
    u = torch.full((1,), float(rank))
    dist.broadcast(u, src=n - 1, group=group)
    return {"torch": t.tolist(), "numpy": a.tolist(), "config": dist.get_backend_config(group),
            "broadcast": u.tolist(), "mpi_ops": sorted(dist.comm_stats()["0"])}


from mpi.list_layouts import LIST_SCENARIOS  # noqa: E402 — (tests/ is on the path, as for this module)

SCENARIOS.update(LIST_SCENARIOS)


def main() -> None:
    name = sys.argv[1]
    if "ACCORD_TEST_GATHER_MAX_WORLD" in os.environ:  # the check of larger groups, on a small one
        from accord.engines.mpi import agreement
        agreement.GATHER_MAX_WORLD = int(os.environ["ACCORD_TEST_GATHER_MAX_WORLD"])
    if os.environ.get("ACCORD_TEST_NO_PERSISTENT"):  # an MPI library before MPI 4
        from accord.engines.mpi import agreement
        agreement.Agreement._persistent_request = lambda self, comm: None
    if os.environ.get("ACCORD_TEST_SUMS_SATURATE"):  # as on Open MPI: small sums by accord's kernel
        from accord.engines.mpi import runtime
        runtime._saturating[:] = [True]
    dist.init_process_group(os.environ.get("ACCORD_TEST_BACKEND", "mpi"), timeout=timedelta(seconds=float(os.environ.get("ACCORD_TEST_TIMEOUT", "20"))))
    rank, n = dist.get_rank(), dist.get_world_size()
    results = {}
    for one in name.split("+"):
        try:
            results[one] = SCENARIOS[one](rank, n)
        except dist.DistError as exc:
            results[one] = {"raised": failure(exc)}
    result = results if "+" in name else results[name]
    with open(os.path.join(os.environ["ACCORD_TEST_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f, default=str)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
