"""The algorithm matrix of reduce, all_gather, gather, scatter, reduce_scatter and all_to_all:
every registered message algorithm forced in turn, world sizes 1–8, counts
0/1/odd/large and uneven per-rank sizes, dtypes and ReduceOps; then the torch-shaped API
(tensor forms, splits, async, subgroups) and its argument checks. Ranks are threads over the
loopback transport; inputs are small integers, so expected results are exact."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import accord as dist
from harness import run_ranks
from test_allreduce_broadcast_barrier import INT_DTYPES, OPS, _valid, message_algorithms, reference

WORLD_SIZES = [1, 2, 3, 4, 5, 8]
COUNTS = [0, 1, 7, 300]  # 300 int64 = 2400 B: dozens of 64-byte segments per block
DTYPES = ["bool", "int8", "uint16", "int64", "float16", "float32", "complex64", "complex128"]


def force(monkeypatch: pytest.MonkeyPatch, collective: str, algorithm: str) -> None:
    monkeypatch.setenv("ACCORD_ALGORITHM", f"{collective}={algorithm}")
    monkeypatch.setenv("ACCORD_SEGMENT_BYTES", "64")  # many segments per block


def block(rank: int, count: int, salt: int = 0, dtype: str = "int64") -> np.ndarray:
    """Rank ``rank``'s data: small distinct integers (exact in every dtype used here)."""
    values = (np.arange(count) % 7) + 10 * rank + salt
    if dtype == "bool":
        return (values + rank) % 2 == 0
    if dtype.startswith("complex"):
        return (values + 1j * (values % 3)).astype(dtype)
    return values.astype(dtype)


def uneven(rank: int, count: int) -> int:
    """A size that differs from rank to rank (0 for some ranks)."""
    return (count + 3 * rank) % (count + 5) if count else (rank % 2)


def cases(collective: str) -> list:
    return [pytest.param(a, n, id=f"{a}-ws{n}") for a in message_algorithms(collective) for n in WORLD_SIZES]


# -- the matrix: every algorithm, world size and count ------------------------------------------

@pytest.mark.parametrize("algorithm,world_size", cases("reduce"))
def test_reduce_every_root_and_count(monkeypatch, algorithm, world_size):
    force(monkeypatch, "reduce", algorithm)

    def body(rank):
        out = []
        for count in COUNTS:
            for root in range(world_size):
                data = block(rank, count, root)
                dist.reduce(data, dst=root)
                out.append((count, root, data))
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for count, root, data in results:
            expected = sum(block(r, count, root) for r in range(world_size)) if rank == root \
                else block(rank, count, root)  # non-roots keep their input
            np.testing.assert_array_equal(data, expected, err_msg=f"rank {rank} root {root} count {count}")


@pytest.mark.parametrize("algorithm,world_size", cases("all_gather"))
def test_all_gather_even_and_uneven(monkeypatch, algorithm, world_size):
    force(monkeypatch, "all_gather", algorithm)

    def body(rank):
        out = []
        for count in COUNTS:
            for size in (lambda r, c=count: c, lambda r, c=count: uneven(r, c)):
                outs = [np.full(size(r), -1, dtype=np.int64) for r in range(world_size)]
                dist.all_gather(outs, block(rank, size(rank)))
                out.append((size, outs))
        return out

    results = run_ranks(world_size, body)
    for rank, runs in enumerate(results):
        for (size, outs), first in zip(runs, results[0]):
            for r in range(world_size):
                np.testing.assert_array_equal(outs[r], block(r, size(r)), err_msg=f"rank {rank} block {r}")
                assert outs[r].tobytes() == first[1][r].tobytes()  # bit-identical everywhere


@pytest.mark.parametrize("algorithm,world_size", cases("gather"))
def test_gather_every_root(monkeypatch, algorithm, world_size):
    force(monkeypatch, "gather", algorithm)

    def body(rank):
        out = []
        for count in COUNTS:
            for root in range(world_size):
                outs = [np.full(count, -1, dtype=np.int64) for _ in range(world_size)] if rank == root else None
                dist.gather(block(rank, count, root), outs, dst=root)
                out.append((count, root, outs))
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for count, root, outs in results:
            if rank != root:
                assert outs is None
                continue
            for r in range(world_size):
                np.testing.assert_array_equal(outs[r], block(r, count, root), err_msg=f"root {root} block {r}")


@pytest.mark.parametrize("algorithm,world_size", cases("scatter"))
def test_scatter_every_root(monkeypatch, algorithm, world_size):
    force(monkeypatch, "scatter", algorithm)

    def body(rank):
        out = []
        for count in COUNTS:
            for root in range(world_size):
                ins = [block(r, count, root) for r in range(world_size)] if rank == root else None
                data = np.full(count, -1, dtype=np.int64)
                dist.scatter(data, ins, src=root)
                out.append((count, root, data))
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for count, root, data in results:
            np.testing.assert_array_equal(data, block(rank, count, root), err_msg=f"rank {rank} root {root}")


@pytest.mark.parametrize("algorithm,world_size", cases("reduce_scatter"))
def test_reduce_scatter_even_and_uneven(monkeypatch, algorithm, world_size):
    force(monkeypatch, "reduce_scatter", algorithm)

    def body(rank):
        out = []
        for count in COUNTS:
            for size in (lambda r, c=count: c, lambda r, c=count: uneven(r, c)):
                ins = [block(rank, size(j), j) for j in range(world_size)]
                kept = [x.copy() for x in ins]
                data = np.full(size(rank), -1, dtype=np.int64)
                dist.reduce_scatter(data, ins)
                assert all((a == b).all() for a, b in zip(ins, kept)), "inputs must not change"
                out.append((size, data))
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for size, data in results:
            expected = sum(block(r, size(rank), rank) for r in range(world_size))
            np.testing.assert_array_equal(data, expected, err_msg=f"rank {rank}")


@pytest.mark.parametrize("algorithm,world_size", cases("all_to_all"))
def test_all_to_all_even_and_uneven(monkeypatch, algorithm, world_size):
    force(monkeypatch, "all_to_all", algorithm)

    def pair(src, dst, count):  # how much src sends dst
        return (count + src + 2 * dst) % (count + 3) if count else (src + dst) % 2

    def body(rank):
        out = []
        for count in COUNTS:
            for size in (lambda s, d, c=count: c, lambda s, d, c=count: pair(s, d, c)):
                ins = [block(rank, size(rank, j), j) for j in range(world_size)]
                outs = [np.full(size(j, rank), -1, dtype=np.int64) for j in range(world_size)]
                dist.all_to_all(outs, ins)
                out.append((size, outs))
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for size, outs in results:
            for j in range(world_size):
                np.testing.assert_array_equal(outs[j], block(j, size(j, rank), rank), err_msg=f"rank {rank} from {j}")


# -- dtypes and ReduceOps --------------------------------------------------------------------------

@pytest.mark.parametrize("collective", ["all_gather", "gather", "scatter", "all_to_all"])
def test_data_movers_keep_every_dtype_bit_exact(monkeypatch, collective):
    world_size = 3

    def body(rank):
        out = {}
        for dtype in DTYPES:
            mine = block(rank, 5, 0, dtype)
            if collective == "all_gather":
                got = [np.zeros(5, dtype=dtype) for _ in range(world_size)]
                dist.all_gather(got, mine)
            elif collective == "gather":
                got = [np.zeros(5, dtype=dtype) for _ in range(world_size)] if rank == 1 else None
                dist.gather(mine, got, dst=1)
            elif collective == "scatter":
                got = [np.zeros(5, dtype=dtype)]
                dist.scatter(got[0], [block(r, 5, 0, dtype) for r in range(world_size)] if rank == 2 else None, src=2)
            else:
                got = [np.zeros(5, dtype=dtype) for _ in range(world_size)]
                dist.all_to_all(got, [block(rank, 5, j, dtype) for j in range(world_size)])
            out[dtype] = got
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for dtype, got in results.items():
            if got is None:
                continue
            for j, value in enumerate(got):
                expected = {"all_gather": block(j, 5, 0, dtype), "gather": block(j, 5, 0, dtype),
                            "scatter": block(rank, 5, 0, dtype),
                            "all_to_all": block(j, 5, rank, dtype)}[collective]
                assert value.dtype == np.dtype(dtype) and value.tobytes() == expected.tobytes(), (dtype, j)


VALID = [(op, dtype) for op in OPS for dtype in INT_DTYPES + ["float16", "float32", "float64", "complex64"]
         if _valid(op, dtype)]


@pytest.mark.parametrize("algorithm", message_algorithms("reduce"))
def test_reduce_every_op_and_dtype(monkeypatch, algorithm):
    force(monkeypatch, "reduce", algorithm)
    world_size, root = 3, 1

    def inputs(rank, dtype):
        values = (np.arange(9) % 5) + rank + 1
        return (values + 1j * (values % 3)).astype(dtype) if dtype.startswith("complex") else values.astype(dtype)

    def body(rank):
        out = {}
        for op, dtype in VALID:
            data = inputs(rank, dtype)
            dist.reduce(data, dst=root, op=getattr(dist.ReduceOp, op))
            out[op, dtype] = data
        return out

    results = run_ranks(world_size, body)
    for (op, dtype), got in results[root].items():
        expected = reference(op, [inputs(r, dtype) for r in range(world_size)])
        np.testing.assert_array_equal(got, expected, err_msg=f"{op} {dtype}")


@pytest.mark.parametrize("algorithm", message_algorithms("reduce_scatter"))
def test_reduce_scatter_every_op_and_dtype(monkeypatch, algorithm):
    force(monkeypatch, "reduce_scatter", algorithm)
    world_size = 3

    def inputs(rank, dtype):
        values = (np.arange(3 * world_size) % 5) + rank + 1
        return (values + 1j * (values % 3)).astype(dtype) if dtype.startswith("complex") else values.astype(dtype)

    def body(rank):
        out = {}
        for op, dtype in VALID:
            data = np.zeros(3, dtype=dtype)
            dist.reduce_scatter_tensor(data, inputs(rank, dtype), op=getattr(dist.ReduceOp, op))
            out[op, dtype] = data
        return out

    for rank, results in enumerate(run_ranks(world_size, body)):
        for (op, dtype), got in results.items():
            expected = reference(op, [inputs(r, dtype) for r in range(world_size)])[3 * rank:3 * rank + 3]
            np.testing.assert_array_equal(got, expected, err_msg=f"{op} {dtype} rank {rank}")


@pytest.mark.parametrize("collective", ["reduce", "reduce_scatter"])
def test_bool_reductions_are_logic(collective):
    inputs = [np.array([True, True, False]), np.array([False, True, False])]

    def body(rank):
        if collective == "reduce":
            out = inputs[rank].copy()
            dist.reduce(out, dst=0, op=dist.ReduceOp.BXOR)
        else:
            out = np.zeros(3, dtype=bool)
            dist.reduce_scatter_tensor(out, np.concatenate([inputs[rank]] * 2), op=dist.ReduceOp.BXOR)
        return out.tolist()

    assert run_ranks(2, body)[0] == [True, False, False]


def test_avg_and_premul_sum_apply_once():
    def body(rank):
        avg = np.full(4, float(rank + 1))
        dist.reduce(avg, dst=0, op=dist.ReduceOp.AVG)
        pre = np.zeros(2)
        dist.reduce_scatter_tensor(pre, np.full(2 * 4, float(rank + 1)), op=dist._make_nccl_premul_sum(0.5))
        return avg, pre

    results = run_ranks(4, body)
    assert results[0][0].tolist() == [2.5] * 4
    assert all(pre.tolist() == [5.0, 5.0] for _, pre in results)


def test_large_float_results_are_bit_identical_across_ranks(monkeypatch):
    """all_gather copies blocks (never combines): every rank holds the same bytes."""
    force(monkeypatch, "all_gather", "ring")

    def body(rank):
        mine = np.random.default_rng(rank).standard_normal(999).astype(np.float32)
        outs = [np.zeros(999, dtype=np.float32) for _ in range(4)]
        dist.all_gather(outs, mine)
        return b"".join(o.tobytes() for o in outs)

    results = run_ranks(4, body)
    assert len(set(results)) == 1


# -- the torch-shaped API: tensor forms, splits, async, subgroups -----------------------------

def test_all_gather_into_tensor_flat_stacked_and_in_place():
    def body(rank):
        mine = np.array([rank, 10 + rank], dtype=np.int32)
        flat = np.zeros(6, dtype=np.int32)
        dist.all_gather_into_tensor(flat, mine)
        stacked = np.zeros((3, 2), dtype=np.int32)
        dist.all_gather_single(stacked, mine)  # torch 2.13's newer name
        in_place = np.zeros(6, dtype=np.int32)
        in_place[2 * rank:2 * rank + 2] = mine
        dist.all_gather_into_tensor(in_place, in_place[2 * rank:2 * rank + 2])
        return flat.tolist(), stacked.tolist(), in_place.tolist()

    for flat, stacked, in_place in run_ranks(3, body):
        assert flat == in_place == [0, 10, 1, 11, 2, 12]
        assert stacked == [[0, 10], [1, 11], [2, 12]]


def test_reduce_scatter_tensor_flat_stacked_and_single():
    def body(rank):
        data = np.arange(8, dtype=np.int64).reshape(4, 2) + rank
        out = np.zeros(2, dtype=np.int64)
        dist.reduce_scatter_tensor(out, data)
        out2 = np.zeros((1, 2), dtype=np.int64)
        dist.reduce_scatter_single(out2, data.reshape(-1), op=dist.ReduceOp.MAX)
        return out.tolist(), out2.tolist()

    for rank, (summed, maxed) in enumerate(run_ranks(4, body)):
        assert summed == [4 * 2 * rank + 6, 4 * (2 * rank + 1) + 6]
        assert maxed == [[2 * rank + 3, 2 * rank + 4]]


def test_docs_uneven_all_to_all_single_and_list():
    """The docs' uneven example (4 ranks), as all_to_all_single with splits and as lists."""
    inputs = [[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15, 16, 17, 18], [20, 21, 22, 23, 24],
              [30, 31, 32, 33, 34, 35, 36]]
    input_splits = [[2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1]]
    output_splits = [[2, 3, 2, 2], [2, 2, 1, 2], [1, 2, 1, 2], [1, 2, 1, 1]]
    expected = [[0, 1, 10, 11, 12, 20, 21, 30, 31], [2, 3, 13, 14, 22, 32, 33],
                [4, 15, 16, 23, 34, 35], [5, 17, 18, 24, 36]]

    def body(rank):
        data = np.array(inputs[rank], dtype=np.int64)
        single = np.zeros(sum(output_splits[rank]), dtype=np.int64)
        dist.all_to_all_single(single, data, output_splits[rank], input_splits[rank])
        pieces = np.split(data, np.cumsum(input_splits[rank])[:-1])
        outs = [np.zeros(n, dtype=np.int64) for n in output_splits[rank]]
        dist.all_to_all(outs, list(pieces))
        return single.tolist(), [o.tolist() for o in outs]

    for rank, (single, outs) in enumerate(run_ranks(4, body)):
        assert single == expected[rank]
        assert sum(outs, []) == expected[rank]


def test_all_to_all_single_even_rows_keep_their_shape():
    def body(rank):
        data = np.arange(12, dtype=np.float32).reshape(6, 2) + 100 * rank
        out = np.zeros((6, 2), dtype=np.float32)
        dist.all_to_all_single(out, data)
        return out

    for rank, out in enumerate(run_ranks(3, body)):
        expected = np.concatenate([np.arange(12, dtype=np.float32).reshape(6, 2)[2 * rank:2 * rank + 2] + 100 * r
                                   for r in range(3)])
        np.testing.assert_array_equal(out, expected)


def test_async_work_returns_results_and_runs_in_order():
    def body(rank):
        outs = [np.zeros(2, dtype=np.int64) for _ in range(2)]
        w1 = dist.all_gather(outs, np.full(2, rank), async_op=True)
        red = np.full(3, rank + 1.0)
        w2 = dist.reduce(red, dst=1, async_op=True)
        sc = np.zeros(1)
        w3 = dist.scatter(sc, [np.array([5.0]), np.array([6.0])] if rank == 0 else None, src=0, async_op=True)
        assert w3.wait() and w2.wait()
        got = w1.result()
        return [o.tolist() for o in got[0]], red.tolist(), sc.tolist()

    results = run_ranks(2, body)
    assert results[0] == ([[0, 0], [1, 1]], [1.0, 1.0, 1.0], [5.0])
    assert results[1] == ([[0, 0], [1, 1]], [3.0, 3.0, 3.0], [6.0])


def test_rooted_collectives_in_a_subgroup_use_global_and_group_ranks():
    def body(rank):
        group = dist.new_group([1, 3])
        if rank not in (1, 3):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert dist.gather(np.zeros(1), None, dst=3, group=group) is None
            return None
        got = [np.zeros(1) for _ in range(2)] if rank == 3 else None
        dist.gather(np.array([float(rank)]), got, dst=3, group=group)  # dst is a global rank
        red = np.array([float(rank)])
        dist.reduce(red, group_dst=0, group=group)  # group rank 0 is global rank 1
        out = np.zeros(1)
        dist.scatter(out, [np.array([7.0]), np.array([8.0])] if rank == 1 else None, group_src=0, group=group)
        return got and [g.tolist() for g in got], red.tolist(), out.tolist()

    results = run_ranks(4, body)
    assert results[3] == ([[1.0], [3.0]], [3.0], [8.0])
    assert results[1] == (None, [4.0], [7.0])


def test_default_roots_are_global_rank_zero():
    def body(rank):
        got = [np.zeros(1) for _ in range(2)] if rank == 0 else None
        dist.gather(np.array([rank + 1.0]), got)
        out = np.zeros(1)
        dist.scatter(out, [np.array([3.0]), np.array([4.0])] if rank == 0 else None)
        return got and [g.tolist() for g in got], out.tolist()

    assert run_ranks(2, body) == [([[1.0], [2.0]], [3.0]), (None, [4.0])]


def test_mismatched_sizes_are_errors_on_every_rank_not_hangs():
    def body(rank):
        outs = [np.zeros(2 + r if rank == 0 else 2) for r in range(2)]  # rank 0 expects 3 from rank 1
        with pytest.raises(dist.CollectiveMismatchError):
            dist.all_gather(outs, np.zeros(2))
        return True

    assert run_ranks(2, body, expect_failure=True) == [True, True]


def test_a_rooted_list_unlike_the_planned_calls_is_refused_not_sent():
    """The short path keeps one plan per tensor shape for gather and scatter and checks the
    root's list on every call: a list unlike the tensor after a planned call (another
    dtype, another size) takes the long path, which refuses it."""
    def body(rank):
        out = np.zeros(2)
        dist.scatter(out, [np.full(2, float(r)) for r in range(2)] if rank == 0 else None, src=0)
        got = [np.zeros(2) for _ in range(2)] if rank == 0 else None
        dist.gather(np.full(2, float(rank)), got, dst=0)
        errors = []
        if rank == 0:
            for wrong in ([np.zeros(2), np.zeros(2, dtype=np.float32)], [np.zeros(2), np.zeros(3)]):
                for call in (lambda: dist.scatter(out, wrong, src=0), lambda: dist.gather(out, wrong, dst=0)):
                    with pytest.raises(ValueError) as raised:
                        call()
                    errors.append(str(raised.value))
        dist.barrier()  # (nothing was sent: the group still works)
        return out.tolist(), None if got is None else [g.tolist() for g in got], len(errors)

    assert run_ranks(2, body) == [([0.0, 0.0], [[0.0, 0.0], [1.0, 1.0]], 4), ([1.0, 1.0], None, 0)]


# -- argument checks: before any byte moves, with what to fix --------------------------------

def _single(body):
    """Run ``body`` on a world of 2; it only makes calls that must fail on the caller's side."""
    return run_ranks(2, lambda rank: body(rank) or True)


@pytest.mark.parametrize("call,error,match", [
    (lambda r: dist.all_gather([np.zeros(2)], np.zeros(2)), ValueError, "has 1 tensors, but the group has 2"),
    (lambda r: dist.all_gather((np.zeros(2), np.zeros(2, dtype=np.int32)), np.zeros(2)), ValueError, "same dtype"),
    (lambda r: dist.all_gather([np.zeros(3), np.zeros(3)], np.zeros(2)), ValueError, "own tensor"),
    (lambda r: dist.all_gather(np.zeros((2, 2)), np.zeros(2)), TypeError, "list of tensors"),
    (lambda r: dist.all_gather_into_tensor(np.zeros(3), np.zeros(2)), ValueError, "group size × input"),
    (lambda r: dist.all_gather_into_tensor(np.zeros(4, dtype=np.int64), np.zeros(2)), ValueError, "same dtype"),
    (lambda r: dist.reduce_scatter_tensor(np.zeros(2), np.zeros(5)), ValueError, "group size × output"),
    (lambda r: dist.reduce_scatter(np.zeros(2), [np.zeros(2)] * 3), ValueError, "has 3 tensors"),
    (lambda r: dist.reduce_scatter(np.zeros(2), [np.zeros(3)] * 2), ValueError, "reduced into this rank"),
    (lambda r: dist.reduce_scatter(np.zeros(2, dtype=bool), [np.zeros(2, dtype=bool)] * 2,
                                   op=dist.ReduceOp.AVG), TypeError, "AVG"),
    (lambda r: dist.reduce(np.zeros(2), dst=2), ValueError, "out of range"),
    (lambda r: dist.reduce(np.zeros(2)), ValueError, "dst is required"),
    (lambda r: dist.reduce(np.zeros(2), dst=0, group_dst=0), ValueError, "not both"),
    (lambda r: dist.gather(np.zeros(2), [np.zeros(2)] * 2, dst=1 - r), ValueError, "must NOT be specified"),
    (lambda r: dist.gather(np.zeros(2), None, dst=r), ValueError, "must be specified on the destination"),
    (lambda r: dist.gather(np.zeros(2), [np.zeros(2), np.zeros(3)], dst=r), ValueError, "gather_list\\[1\\]"),
    (lambda r: dist.scatter(np.zeros(2), [np.zeros(2)] * 2, src=1 - r), ValueError, "must NOT be specified"),
    (lambda r: dist.scatter(np.zeros(2), [], src=r), ValueError, "must be specified on the source"),
    (lambda r: dist.scatter(np.zeros(2), [np.zeros(2, dtype=np.int8)] * 2, src=r), ValueError, "same dtype"),
    (lambda r: dist.all_to_all([np.zeros(1)] * 2, [np.zeros(1)] * 3), ValueError, "input_tensor_list has 3"),
    (lambda r: dist.all_to_all([np.zeros(2), np.zeros(2)], [np.zeros(1), np.zeros(1)]), ValueError, "own input"),
    (lambda r: dist.all_to_all_single(np.zeros(3), np.zeros(3)), ValueError, "do not split evenly"),
    (lambda r: dist.all_to_all_single(np.zeros(4), np.zeros(4), [1, 3], [2, 1]), ValueError, "sum to 3"),
    (lambda r: dist.all_to_all_single(np.zeros(4), np.zeros(4), [1, 1, 2], None), ValueError, "has 3 entries"),
    (lambda r: dist.all_to_all_single(np.zeros(4), np.zeros(4), [-1, 5], None), ValueError, "negative"),
    (lambda r: dist.all_to_all_single(np.zeros(()), np.zeros(())), ValueError, "0-d"),
    (lambda r: dist.all_to_all_single(np.zeros(4), np.zeros(4), [3, 1], [1, 3]), ValueError, "split sizes"),
    (lambda r: dist.all_gather([np.zeros(2)] * 2, [1, 2]), TypeError, "NumPy array or a torch tensor"),
])
def test_caller_errors_name_the_fix(call, error, match):
    def body(rank):
        with pytest.raises(error, match=match):
            call(rank)
        x = np.array([rank])
        dist.all_reduce(x)  # nothing moved: the group still works
        assert x[0] == 1

    _single(body)


def test_read_only_outputs_are_refused_but_inputs_may_be_read_only():
    def body(rank):
        frozen = np.zeros(4)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            dist.all_gather_into_tensor(frozen, np.zeros(2))
        src = np.full(2, float(rank))
        src.flags.writeable = False
        out = np.zeros(4)
        dist.all_gather_into_tensor(out, src)
        return out.tolist()

    assert run_ranks(2, body) == [[0.0, 0.0, 1.0, 1.0]] * 2


def test_non_contiguous_outputs_get_their_results():
    def body(rank):
        base = np.zeros((3, 4), dtype=np.int64)
        dist.all_gather_into_tensor(base[:, ::2], np.full(2, rank + 1))  # a strided view
        red = np.zeros((2, 3), dtype=np.int64)
        dist.reduce_scatter_tensor(red[:, 1], np.arange(6, dtype=np.int64) + rank)  # a column
        rows = np.zeros((3, 4), dtype=np.int64)
        dist.all_gather([rows[i, 1::2] for i in range(3)], np.full(2, 10 * rank))
        return base, red, rows

    for rank, (base, red, rows) in enumerate(run_ranks(3, body)):
        assert (base[:, ::2] == [[1, 1], [2, 2], [3, 3]]).all() and (base[:, 1::2] == 0).all()
        assert red[:, 1].tolist() == [6 * rank + 3, 6 * rank + 6] and (red[:, ::2] == 0).all()
        assert (rows[:, 1::2] == [[0, 0], [10, 10], [20, 20]]).all() and (rows[:, ::2] == 0).all()
