"""Two hosts × two ranks: the hierarchical collectives' results, and the bytes that leave this
host (its data interface's tx counter, named by ACCORD_SOCKET_IFNAME or GLOO_SOCKET_IFNAME)
for all_reduce on the world (hierarchical) and on a group of the same ranks forced flat
(ACCORD_ALGORITHM=all_reduce=ring while it is made). Prints one JSON line per rank; with
VICTIM=<rank>, that rank exits in the middle of the calls and the others report what they
raised and after how long."""

import json
import os
import time

import numpy as np

import accord as dist

MIB = 1 << 20


def tx_bytes() -> int:
    ifname = os.environ.get("ACCORD_SOCKET_IFNAME") or os.environ["GLOO_SOCKET_IFNAME"]
    with open(f"/sys/class/net/{ifname}/statistics/tx_bytes") as f:
        return int(f.read())


def measured(group, count: int, rounds: int) -> tuple[int, float]:
    """Bytes this host sent, and seconds per call, over ``rounds`` all_reduces on ``group``."""
    data = np.ones(count, np.float32)
    dist.all_reduce(data, group=group)  # warm: inner groups, connections
    dist.barrier()
    before, start = tx_bytes(), time.perf_counter()
    for _ in range(rounds):
        dist.all_reduce(data, group=group)
    took = (time.perf_counter() - start) / rounds
    dist.barrier()
    return tx_bytes() - before, took


def bench(n: int, count: int, rounds: int) -> dict:
    """Seconds per call of each hierarchical collective at ``count`` float32 elements, on the
    world (hierarchical) and on a group forced flat (ACCORD_ALGORITHM while it is made)."""
    os.environ["ACCORD_HIERARCHY"] = "0"  # accord's flat choices, for this group only
    flat = dist.new_group(list(range(n)))
    del os.environ["ACCORD_HIERARCHY"]
    data = np.ones(count, np.float32)
    chunks = [np.ones(count // n, np.float32) for _ in range(n)]
    calls = {
        "all_reduce": lambda g: dist.all_reduce(data, group=g),
        "broadcast": lambda g: dist.broadcast(data, src=0, group=g),
        "all_gather": lambda g: dist.all_gather(chunks, chunks[0].copy(), group=g),
        "reduce_scatter": lambda g: dist.reduce_scatter(np.empty(count // n, np.float32), chunks, group=g),
        "barrier": lambda g: dist.barrier(group=g),
    }
    out = {}
    for name, call in calls.items():
        for label, group in (("flat", flat), ("hier", None)):
            for _ in range(4):  # warm: connections, pages, the hierarchy's measured all_reduces
                call(group)
            dist.barrier()
            times = []
            for _ in range(rounds if count > 4096 else 20 * rounds):
                start = time.perf_counter()
                call(group)
                times.append(time.perf_counter() - start)
            dist.barrier()
            out[f"{name}/{label}"] = sorted(times)[len(times) // 2]
    return out


def results(rank: int, n: int) -> dict:
    out = {}
    x = np.arange(5, dtype=np.int64) + rank
    dist.all_reduce(x)
    out["all_reduce"] = x.tolist()
    b = np.full(3, rank, np.float64)
    dist.broadcast(b, src=n - 1)
    out["broadcast"] = b.tolist()
    outs = [np.zeros(r + 1, np.int32) for r in range(n)]
    dist.all_gather(outs, np.full(rank + 1, rank, np.int32))
    out["all_gather"] = [o.tolist() for o in outs]
    res = np.zeros(2, np.int64)
    dist.reduce_scatter(res, [np.full(2, 10 * rank + j, np.int64) for j in range(n)])
    out["reduce_scatter"] = res.tolist()
    dist.barrier()
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    victim = int(os.environ.get("VICTIM", "-1"))
    if victim >= 0:
        data = np.ones(MIB, np.float32)
        for i in range(30):
            if rank == victim and i == 10:
                os._exit(0)  # "successfully": the launcher leaves the others running
            start = time.monotonic()
            try:
                dist.all_reduce(data)
            except Exception as exc:  # noqa: BLE001 — reported
                print("RESULT " + json.dumps({"rank": rank, "error": type(exc).__name__, "message": str(exc),
                                              "after": time.monotonic() - start}), flush=True)
                time.sleep(3)  # each survivor finds out for itself, not from another leaving
                os._exit(0)
        return
    if os.environ.get("BENCH"):
        print("RESULT " + json.dumps({"rank": rank, **bench(n, int(os.environ["BENCH"]), 7)}), flush=True)
        dist.destroy_process_group()
        return
    out = {"rank": rank, "results": results(rank, n),
           "hierarchical": repr(dist.group.WORLD.engine.hierarchy)}
    os.environ["ACCORD_ALGORITHM"] = "all_reduce=ring"
    flat = dist.new_group(list(range(n)))
    del os.environ["ACCORD_ALGORITHM"]
    count, rounds = 4 * MIB, 3
    out["flat"] = measured(flat, count, rounds)
    out["hier"] = measured(None, count, rounds)
    out["bytes"] = count * 4 * rounds
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
