"""The new collectives with CPU torch tensors: bfloat16 exactness, non-contiguous outputs
(results written back into the view), zero-element tensors, every collective once, and a
clear error for tensors that are not on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import accord as dist  # noqa: E402
from harness import run_ranks  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("algorithm", ["direct", "ring"])
def test_bfloat16_reductions_are_exact_on_small_integers(monkeypatch, algorithm):
    monkeypatch.setenv("ACCORD_ALGORITHM", f"reduce_scatter={algorithm}")
    monkeypatch.setenv("ACCORD_SEGMENT_BYTES", "16")
    world = 3

    def body(rank):
        values = torch.arange(12, dtype=torch.bfloat16) + rank  # sums < 256: exact in bfloat16
        summed = values.clone()
        dist.all_reduce(summed)
        scattered = torch.zeros(4, dtype=torch.bfloat16)
        dist.reduce_scatter_tensor(scattered, values)
        reduced = values.clone()
        dist.reduce(reduced, dst=0, op=dist.ReduceOp.MAX)
        return summed, scattered, reduced

    for rank, (summed, scattered, reduced) in enumerate(run_ranks(world, body)):
        expected = torch.arange(12, dtype=torch.float32) * world + 3
        assert summed.dtype == torch.bfloat16 and torch.equal(summed.float(), expected)
        assert torch.equal(scattered.float(), expected[4 * rank:4 * rank + 4])
        if rank == 0:
            assert torch.equal(reduced.float(), torch.arange(12, dtype=torch.float32) + 2)


def test_non_contiguous_outputs_are_written_back():
    def body(rank):
        out = torch.zeros(3, 4)
        dist.all_gather_into_tensor(out.t(), torch.full((3,), float(rank)))  # a transposed view
        cols = torch.zeros(3, 4)
        dist.all_gather([cols[:, i] for i in range(4)], torch.tensor([1.0, 2.0, 3.0]) * rank)
        red = torch.zeros(2, 5)
        dist.reduce_scatter_tensor(red[:, 0], torch.arange(8.0) + rank)
        a2a = torch.zeros(4, 2)
        dist.all_to_all_single(a2a[:, 1], torch.arange(4.0) + 10 * rank)
        return out, cols, red, a2a

    for rank, (out, cols, red, a2a) in enumerate(run_ranks(4, body)):
        assert torch.equal(out, torch.arange(4.0).expand(3, 4))
        assert torch.equal(cols, torch.tensor([[0.0, 1, 2, 3], [0, 2, 4, 6], [0, 3, 6, 9]]))
        assert red[:, 0].tolist() == [8.0 * rank + 6, 8.0 * rank + 10] and red[:, 1:].abs().sum() == 0
        assert a2a[:, 1].tolist() == [rank + 10.0 * r for r in range(4)] and a2a[:, 0].abs().sum() == 0


def test_zero_element_tensors_in_every_collective():
    def body(rank):
        empty = torch.zeros(0, 3)
        dist.reduce(empty.clone(), dst=0)
        dist.all_gather([torch.zeros(0, 3) for _ in range(2)], empty)
        dist.all_gather_into_tensor(torch.zeros(0, 3), empty)
        dist.gather(empty, [torch.zeros(0, 3)] * 2 if rank == 0 else None, dst=0)
        dist.scatter(torch.zeros(0), [torch.zeros(0)] * 2 if rank == 1 else None, src=1)
        dist.reduce_scatter(torch.zeros(0), [torch.zeros(0)] * 2)
        dist.reduce_scatter_tensor(torch.zeros(0), torch.zeros(0))
        dist.all_to_all([torch.zeros(0)] * 2, [torch.zeros(0)] * 2)
        dist.all_to_all_single(torch.zeros(0, 2), torch.zeros(0, 2))
        return True

    assert run_ranks(2, body) == [True, True]


def test_every_collective_with_torch_tensors():
    def body(rank):
        n = 3
        out = {}
        t = torch.tensor([1, 2], dtype=torch.int32) + rank
        dist.reduce(t, dst=2)
        out["reduce"] = t.tolist()
        lst = [torch.zeros(2, dtype=torch.complex64) for _ in range(n)]
        dist.all_gather(lst, torch.tensor([1 + 1j, 2 + 2j], dtype=torch.complex64) * (rank + 1))
        out["all_gather"] = [x.tolist() for x in lst]
        g = [torch.zeros(1, dtype=torch.int8) for _ in range(n)] if rank == 0 else None
        dist.gather(torch.tensor([rank], dtype=torch.int8), g)
        out["gather"] = g and [x.item() for x in g]
        s = torch.zeros(2, dtype=torch.float16)
        dist.scatter(s, [torch.full((2,), r + 0.5, dtype=torch.float16) for r in range(n)] if rank == 0 else None)
        out["scatter"] = s.tolist()
        rs = torch.zeros(1, dtype=torch.bool)
        dist.reduce_scatter(rs, [torch.tensor([rank == j]) for j in range(n)])
        out["reduce_scatter"] = rs.tolist()
        a2a = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
        dist.all_to_all(a2a, [torch.tensor([10 * rank + j]) for j in range(n)])
        out["all_to_all"] = [x.item() for x in a2a]
        return out

    results = run_ranks(3, body)
    assert results[2]["reduce"] == [6, 9] and results[0]["reduce"] == [1, 2]
    assert results[1]["all_gather"] == [[complex(r + 1, r + 1), complex(2 * r + 2, 2 * r + 2)] for r in range(3)]
    assert results[0]["gather"] == [0, 1, 2]
    assert [r["scatter"] for r in results] == [[0.5, 0.5], [1.5, 1.5], [2.5, 2.5]]
    assert [r["reduce_scatter"] for r in results] == [[True]] * 3
    assert results[1]["all_to_all"] == [1, 11, 21]


def test_tensors_off_the_cpu_are_a_clear_error():
    def body(rank):
        meta = torch.empty(4, device="meta")  # stands in for a CUDA tensor on this machine
        with pytest.raises(ValueError, match="CPU tensors"):
            dist.all_gather_into_tensor(meta, torch.zeros(2))
        with pytest.raises(ValueError, match="CPU tensors"):
            dist.all_to_all([torch.zeros(1), meta], [torch.zeros(1)] * 2)
        return True

    assert run_ranks(2, body) == [True, True]


def _kinds(rank):
    """How each rank passes its tensors: rank 0 NumPy arrays and rank 1 plain torch tensors
    (both the short path: a tensor is seen as an array, ``arrays.plain_view``), rank 2
    transposed-back torch views (not contiguous: the long path)."""
    import numpy as np

    def make(values):
        t = torch.as_tensor(np.asarray(values)).clone()
        if rank == 0:
            return t.numpy().copy()
        if rank == 1:
            return t
        return torch.stack([t, t], dim=-1)[..., 0]  # every other element of a wider tensor
    return make


@pytest.mark.parametrize("shared", [True, False], ids=["shm", "messages"])
def test_plain_tensors_take_the_short_path_and_meet_the_other_paths(shared):
    """Plain CPU tensors take the short path as NumPy arrays do (no Buffer, plan cached),
    written in place, the storage still resizable (FSDP frees flat parameters by resizing
    them), and meet ranks on NumPy and on the long path (strided tensors) in every
    collective; bfloat16 and strided tensors keep the long path."""
    import numpy as np
    from accord.transport.loopback import LoopbackFabric
    n = 3

    def body(rank):
        make = _kinds(rank)
        got = []
        for repeat in range(2):
            x = np.arange(4, dtype=np.float32) + 10 * rank + repeat
            y = make(x)
            dist.all_reduce(y)
            got.append(np.asarray(y).tolist())
            b = make(x)
            dist.broadcast(b, src=1)
            got.append(np.asarray(b).tolist())
            r = make(x)
            dist.reduce(r, dst=1, op=dist.ReduceOp.MAX)
            got.append(np.asarray(r).tolist())
            outs = [make(np.zeros(4, np.float32)) for _ in range(n)]
            dist.all_gather(outs, make(x))
            got.append([np.asarray(o).tolist() for o in outs])
            whole = make(np.zeros(4 * n, np.float32))
            dist.all_gather_into_tensor(whole, make(x))
            got.append(np.asarray(whole).tolist())
            part = make(np.zeros(4, np.float32))
            dist.reduce_scatter_tensor(part, make(np.arange(4 * n, dtype=np.float32) + rank))
            got.append(np.asarray(part).tolist())
            single = make(np.zeros(3 * n, np.int64))
            dist.all_to_all_single(single, make(np.arange(3 * n, dtype=np.int64) + 100 * rank))
            got.append(np.asarray(single).tolist())
            listed = [make(np.zeros(4, np.float32)) for _ in range(n)] if rank == 1 else None
            dist.gather(make(x), listed, dst=1)
            got.append([np.asarray(o).tolist() for o in listed] if listed else None)
            s = make(np.zeros(4, np.float32))
            dist.scatter(s, [make(np.full(4, 7.0 * j, np.float32)) for j in range(n)] if rank == 1 else None, src=1)
            got.append(np.asarray(s).tolist())
        group = dist.group.WORLD
        planned = len(group.plans)
        t = torch.ones(8)
        dist.all_reduce(t)
        t.untyped_storage().resize_(0)  # what FSDP does to a flat parameter: still allowed
        bf = torch.arange(4, dtype=torch.bfloat16) + rank
        dist.all_reduce(bf)
        return got, planned, bf.float().tolist()

    fabric = LoopbackFabric(n, shared_memory=shared)
    results = run_ranks(n, body, fabric=fabric)
    for rank, (got, planned, bf) in enumerate(results):
        assert (planned > 0) == (rank < 2)  # ranks 0 and 1 took the short path, rank 2 not
        for repeat in range(2):
            rows = [[float(i + 10 * r + repeat) for i in range(4)] for r in range(n)]
            ar, b, r, ag, agt, rst, single, gathered, scattered = got[9 * repeat:9 * repeat + 9]
            assert ar == [sum(col) for col in zip(*rows)]
            assert b == rows[1]
            assert r == ([max(col) for col in zip(*rows)] if rank == 1 else rows[rank])
            assert ag == rows and agt == [v for row in rows for v in row]
            assert rst == [float(sum(4 * rank + k + q for q in range(n))) for k in range(4)]
            assert single == [100 * q + 3 * rank + k for q in range(n) for k in range(3)]
            assert gathered == (rows if rank == 1 else None)
            assert scattered == [7.0 * rank] * 4
        assert bf == [float(n * i + sum(range(n))) for i in range(4)]
