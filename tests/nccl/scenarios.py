"""Programs for the "cpu:accord,cuda:nccl" routing tests, each run by ``python -m accord.run
--nproc-per-node N -m nccl.scenarios NAME`` (tests/ on PYTHONPATH). Every rank writes what it
saw into ``$ACCORD_TEST_OUT/rank<N>.json``.

The device tensors are CUDA tensors when ``ACCORD_TEST_DEVICE=cuda`` (a GPU machine), else CPU
torch tensors with ``ACCORD_NCCL_STANDIN=gloo``: torch's gloo stands in for NCCL and carries
them, while NumPy arrays stay on accord's own backend, so the routing is the same code.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch

import accord as dist

#: what the all_to_all entries hold where the stand-in (torch < 2.13's gloo) has no alltoall
STANDIN_LACKS_ALLTOALL = "the stand-in has no alltoall"

SCENARIOS: dict[str, Callable[[int, int], Any]] = {}


def scenario(fn: Callable[[int, int], Any]) -> Callable[[int, int], Any]:
    SCENARIOS[fn.__name__] = fn
    return fn


def device() -> torch.device:
    if os.environ.get("ACCORD_TEST_DEVICE") == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def full(shape: Any, value: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.full(shape if isinstance(shape, tuple) else (shape,), value, dtype=dtype, device=device())


def zeros(count: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(count, dtype=dtype, device=device())


def listed(tensors: Any) -> Any:
    return [t.cpu().tolist() for t in tensors]


@scenario
def collectives(rank: int, n: int) -> Any:
    """Every collective on device tensors (closed forms), NumPy beside them, and what accord's
    own backend counted (only the NumPy calls)."""
    out: dict[str, Any] = {"config": dist.get_backend_config()}
    t = full(3, rank + 1)
    dist.all_reduce(t)
    out["all_reduce"] = t.cpu().tolist()
    m = full(2, rank, torch.int64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = m.cpu().tolist()
    arr = np.full(2, rank + 1, np.int64)
    dist.all_reduce(arr)  # NumPy: accord's backend
    out["numpy"] = arr.tolist()
    b = full(2, rank)
    dist.broadcast(b, src=n - 1)
    out["broadcast"] = b.cpu().tolist()
    r = full(2, rank + 1)
    dist.reduce(r, dst=0)
    out["reduce_root"] = r.cpu().tolist() if rank == 0 else None
    gathered = [zeros(2) for _ in range(n)]
    dist.all_gather(gathered, full(2, rank))
    out["all_gather"] = listed(gathered)
    into = zeros(2 * n)
    dist.all_gather_into_tensor(into, full(2, 10 * rank))
    out["all_gather_into_tensor"] = into.cpu().tolist()
    g = [zeros(1) for _ in range(n)] if rank == 0 else None
    dist.gather(full(1, rank), g, dst=0)
    out["gather"] = listed(g) if g else None
    s = zeros(1)
    dist.scatter(s, [full(1, 5 * j) for j in range(n)] if rank == 0 else None, src=0)
    out["scatter"] = s.cpu().tolist()
    rs = zeros(2)
    dist.reduce_scatter(rs, [full(2, rank + j) for j in range(n)])
    out["reduce_scatter"] = rs.cpu().tolist()
    rst = zeros(1)
    dist.reduce_scatter_tensor(rst, torch.arange(n, dtype=torch.float32, device=device()) + rank)
    out["reduce_scatter_tensor"] = rst.cpu().tolist()
    recvs = [zeros(1) for _ in range(n)]
    single = zeros(n)
    try:
        dist.all_to_all(recvs, [full(1, 100 * rank + j) for j in range(n)])
        dist.all_to_all_single(single, torch.arange(n, dtype=torch.float32, device=device()) + 100 * rank)
        out["all_to_all"], out["all_to_all_single"] = listed(recvs), single.cpu().tolist()
    except RuntimeError as e:  # torch < 2.13's gloo (the stand-in) has no alltoall; NCCL has
        if "does not support alltoall" not in str(e):
            raise
        out["all_to_all"] = out["all_to_all_single"] = STANDIN_LACKS_ALLTOALL
    work = dist.all_reduce(full(1, 1), async_op=True)
    out["work_type"] = f"{type(work).__module__}.{type(work).__name__}"
    out["work_wait"] = work.wait()
    dist.barrier()
    out["accord_ops"] = {op: s["calls"] for op, s in dist.comm_stats()["0"].items()}
    return out


@scenario
def groups(rank: int, n: int) -> Any:
    """Subgroups get their own device group, for their own ranks."""
    out: dict[str, Any] = {}
    head = dist.new_group(list(range(n - 1)) or [0])  # all but the last rank (world 1: rank 0)
    if head is not dist.GroupMember.NON_GROUP_MEMBER:
        t = full(1, rank + 1)
        dist.all_reduce(t, group=head)
        out["head"] = {"sum": t.cpu().tolist(), "config": dist.get_backend_config(head)}
    else:
        out["head"] = None
    mine, _ = dist.new_subgroups(group_size=1 if n % 2 else 2)
    t = full(1, rank + 1)
    dist.all_reduce(t, group=mine)
    out["subgroup"] = {"sum": t.cpu().tolist(), "ranks": dist.get_process_group_ranks(mine)}
    split = dist.split_group(split_ranks=[[r] for r in range(n)])
    t = full(1, rank + 1)
    dist.all_reduce(t, group=split)
    out["split"] = t.cpu().tolist()
    cpu_only = dist.new_group(backend="gloo")  # an explicit CPU backend: no device group
    out["cpu_only_config"] = dist.get_backend_config(cpu_only)
    return out


@scenario
def p2p(rank: int, n: int) -> Any:
    """send/recv, isend/irecv, any-source receive and a batched ring on device tensors."""
    out: dict[str, Any] = {}
    right, left = (rank + 1) % n, (rank - 1) % n
    got = zeros(2)
    if rank % 2 == 0:
        dist.send(full(2, rank), dst=right)
        out["recv_from"] = dist.recv(got, src=left)
    else:
        out["recv_from"] = dist.recv(got, src=left)
        dist.send(full(2, rank), dst=right)
    out["recv"] = got.cpu().tolist()
    box = zeros(1)
    works = [dist.isend(full(1, 10 + rank), dst=right, tag=3), dist.irecv(box, src=left, tag=3)]
    for w in works:
        w.wait()
    out["irecv"] = box.cpu().tolist()
    if rank == 0:
        senders = set()
        if device().type == "cuda":  # NCCL (and torch on it) has no any-source receive: it
            try:                     # says so at once; then each source is named
                dist.irecv(zeros(1), tag=5)
            except Exception as exc:  # noqa: BLE001 — the test reads the type
                out["any_source_error"] = type(exc).__name__
            for src in range(1, n):
                senders.add(dist.recv(zeros(1), src=src, tag=5))
        else:
            for _ in range(n - 1):
                any_box = zeros(1)
                senders.add(dist.recv(any_box, tag=5))
        out["any_source"] = sorted(senders)
    else:
        dist.send(full(1, rank), dst=0, tag=5)
    ring = zeros(3)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, full(3, rank), right),
                                    dist.P2POp(dist.irecv, ring, left)])
    for w in works:
        w.wait()
    out["batch"] = ring.cpu().tolist()
    return out


@scenario
def bad_input(rank: int, n: int) -> Any:
    """Clear errors, raised before anything moves, and the group still works after them."""
    out: dict[str, Any] = {}

    def error(fn: Callable[[], Any]) -> Any:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 — the test reads type and message
            return [type(exc).__name__, str(exc)]
        return None

    stray = [zeros(1) for _ in range(n)]
    out["gather_list_off_root"] = error(lambda: dist.gather(full(1, 0), stray, dst=(rank + 1) % n))
    out["mixed_batch"] = error(lambda: dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, full(1, 0), (rank + 1) % n),
         dist.P2POp(dist.irecv, np.zeros(1), (rank - 1) % n)]))
    out["complex_max"] = error(lambda: dist.all_reduce(torch.zeros(2, dtype=torch.complex64, device=device()),
                                                       op=dist.ReduceOp.MAX))
    t = full(1, 1)
    dist.all_reduce(t)
    out["after"] = t.cpu().tolist()
    return out


@scenario
def everything(rank: int, n: int) -> Any:
    """collectives, p2p and bad_input in one job (one start-up instead of three)."""
    return {name: SCENARIOS[name](rank, n) for name in ("collectives", "p2p", "bad_input")}


@scenario
def multigpu(rank: int, n: int) -> Any:
    """The *_multigpu collectives on lists of device tensors (one list element per device:
    on a GPU machine, the list's tensors all on this rank's device), and on NumPy lists."""
    out: dict[str, Any] = {}
    devices = 2
    tensors = [full(2, rank * devices + j + 1) for j in range(devices)]
    dist.all_reduce_multigpu(tensors)
    out["all_reduce"] = [t.tolist() for t in tensors]
    tensors = [full(1, 10 * rank + j) for j in range(devices)]
    dist.broadcast_multigpu(tensors, src=n - 1, src_tensor=1)
    out["broadcast"] = [t.tolist() for t in tensors]
    tensors = [full(1, rank * devices + j + 1) for j in range(devices)]
    dist.reduce_multigpu(tensors, dst=0, dst_tensor=1)
    out["reduce"] = [t.tolist() for t in tensors]
    outputs = [[full(1, -1) for _ in range(n * devices)] for _ in range(devices)]
    dist.all_gather_multigpu(outputs, [full(1, rank * devices + j) for j in range(devices)])
    out["all_gather"] = [[t.item() for t in each] for each in outputs]
    results = [full(1, 0) for _ in range(devices)]
    inputs = [[full(1, x + i) for x in range(n * devices)] for i in range(devices)]
    work = dist.reduce_scatter_multigpu(results, inputs, async_op=True)
    work.wait()
    out["reduce_scatter"] = [t.item() for t in results]
    arrays = [np.full(2, rank * devices + j + 1.0) for j in range(devices)]
    dist.all_reduce_multigpu(arrays)
    out["numpy"] = [a.tolist() for a in arrays]
    out["accord_ops"] = {op: s["calls"] for op, s in dist.comm_stats()["0"].items()}
    return out


def main() -> None:
    name = sys.argv[1]
    dist.init_process_group(os.environ.get("ACCORD_TEST_BACKEND", "cpu:accord,cuda:nccl"),
                            timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    result = SCENARIOS[name](rank, n)
    with open(os.path.join(os.environ["ACCORD_TEST_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f, default=str)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
