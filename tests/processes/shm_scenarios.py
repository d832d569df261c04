"""What the shared-memory process tests run in each rank: every collective, checked against
closed forms, at the sizes where the algorithm changes (a few bytes: one-shot; more than a
slot: chunked rounds; 64 KiB and up: single-copy reads), plus p2p through the rings."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from numpy.testing import assert_array_equal

SIZES = [1, 3000, 20_000]  # float64: 8 B, 24 KB (> the 16 KiB slot), 160 KB (single-copy)


def run_everything(rank: int, n: int) -> dict[str, Any]:
    import accord as dist

    group = dist.group.WORLD
    tri = n * (n - 1) // 2
    for count in SIZES:
        base = np.arange(count, dtype=np.float64)
        x = base + rank
        dist.all_reduce(x)
        assert_array_equal(x, n * base + tri)
        x = base + rank
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        assert_array_equal(x, base + n - 1)
        for root in range(n):
            b = base * (rank == root)
            dist.broadcast(b, src=root)
            assert_array_equal(b, base)
            r = base + rank
            dist.reduce(r, dst=root)
            assert_array_equal(r, n * base + tri if rank == root else base + rank)
        outs = [np.zeros(count + j) for j in range(n)]
        dist.all_gather(outs, np.full(count + rank, float(rank)))
        for j, o in enumerate(outs):
            assert_array_equal(o, np.full(count + j, float(j)))
        flat = np.zeros(n * count)
        dist.all_gather_into_tensor(flat, base + rank)
        assert_array_equal(flat, np.concatenate([base + j for j in range(n)]))
        out = np.zeros(count)
        dist.reduce_scatter_tensor(out, np.tile(base, n) + rank)
        assert_array_equal(out, n * base + tri)
        ins = [np.full(count + j, float(10 * rank + j)) for j in range(n)]
        got = [np.zeros(count + rank) for _ in range(n)]
        dist.all_to_all(got, ins)
        for j, o in enumerate(got):
            assert_array_equal(o, np.full(count + rank, float(10 * j + rank)))
        gather = [np.zeros(count) for _ in range(n)] if rank == 0 else None
        dist.gather(base + rank, gather, dst=0)
        if gather is not None:
            for j, o in enumerate(gather):
                assert_array_equal(o, base + j)
        mine = np.zeros(count)
        dist.scatter(mine, [base * j for j in range(n)] if rank == n - 1 else None, src=n - 1)
        assert_array_equal(mine, base * rank)
    if n > 1:  # point-to-point through the rings, large enough to wrap them many times
        right, left = (rank + 1) % n, (rank - 1) % n
        send = np.arange(700_000, dtype=np.float64) + rank
        recv = np.zeros_like(send)
        work = dist.isend(send, dst=right)
        dist.recv(recv, src=left)
        work.wait()
        assert_array_equal(recv, np.arange(700_000) + left)
    objs = [None]
    dist.broadcast_object_list(objs if rank else [{"from": 0, "array": np.arange(3)}], src=0)
    dist.barrier()
    mesh = group.engine.mesh
    return {"shared": group.engine.shared, "cma": group.engine.cma,
            "rings": sorted(getattr(mesh, "ring_peers", [])), "pid": os.getpid()}
