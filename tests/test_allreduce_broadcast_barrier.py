"""The algorithm matrix of all_reduce, broadcast and barrier (the other collectives':
test_rooted_and_exchange_collectives.py): every registered algorithm, world sizes 1–8, counts
0/1/odd/large, every dtype and ReduceOp, ranks as threads over the loopback transport."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import accord as dist
from accord.collectives.registry import ALGORITHMS
from accord.transport.loopback import LoopbackFabric
from harness import run_ranks

WORLD_SIZES = [1, 2, 3, 4, 5, 8]
COUNTS = [0, 1, 3, 8, 9, 1000]
INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOAT_DTYPES = ["float16", "float32", "float64"]
COMPLEX_DTYPES = ["complex64", "complex128"]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def message_algorithms(collective: str) -> list[str]:
    return sorted(n for n, a in ALGORITHMS[collective].items() if a.kind == "messages")


def force(monkeypatch: pytest.MonkeyPatch, collective: str, algorithm: str, segment: int = 24) -> None:
    monkeypatch.setenv("ACCORD_ALGORITHM", f"{collective}={algorithm}")
    monkeypatch.setenv("ACCORD_SEGMENT_BYTES", str(segment))  # many segments per chunk


def rank_input(rank: int, count: int, dtype: str) -> np.ndarray:
    values = (np.arange(count) % 5) + rank + 1  # small positive integers: exact everywhere
    if dtype.startswith("complex"):
        return (values + 1j * (values % 3)).astype(dtype)
    return values.astype(dtype)


def reference(op: str, inputs: list[np.ndarray]) -> np.ndarray:
    """What every rank must hold after all_reduce, computed the same way the kernels do."""
    n = len(inputs)
    ufunc = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum,
             "MAX": np.maximum, "BAND": np.bitwise_and, "BOR": np.bitwise_or,
             "BXOR": np.bitwise_xor}[op]
    with np.errstate(all="ignore"):
        result = functools.reduce(lambda a, b: ufunc(a, b), [x.copy() for x in inputs])
        if op == "AVG":
            if result.dtype.kind in "iu":
                q = result // n
                if result.dtype.kind == "i":
                    q += (result % n != 0) & (result < 0)
                return q
            return (result / n).astype(result.dtype)
    return result


def _valid(op: str, dtype: str) -> bool:
    kind = np.dtype(dtype).kind
    if kind == "c":
        return op in ("SUM", "AVG")
    if op in ("BAND", "BOR", "BXOR"):
        return kind in "iu"
    return True


@pytest.mark.parametrize("algorithm", message_algorithms("all_reduce"))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_all_reduce_sum_every_algorithm(monkeypatch, algorithm, world_size, count):
    force(monkeypatch, "all_reduce", algorithm)

    def body(rank):
        data = np.arange(count, dtype=np.float64) * world_size + rank
        dist.all_reduce(data)
        return data

    expected = np.arange(count) * world_size**2 + world_size * (world_size - 1) / 2
    for rank, result in enumerate(run_ranks(world_size, body)):
        np.testing.assert_array_equal(result, expected, err_msg=f"rank {rank}")


VALID_OP_DTYPE = [(op, dtype) for op in OPS for dtype in INT_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES
                  if _valid(op, dtype)]  # the invalid ones: test_reduce_op_dtype_errors


@pytest.mark.parametrize("algorithm", message_algorithms("all_reduce"))
@pytest.mark.parametrize("op,dtype", VALID_OP_DTYPE)
def test_all_reduce_every_dtype_and_op(monkeypatch, algorithm, dtype, op):
    force(monkeypatch, "all_reduce", algorithm)
    world_size, count = 3, 11
    inputs = [rank_input(r, count, dtype) for r in range(world_size)]

    def body(rank):
        data = inputs[rank].copy()
        dist.all_reduce(data, op=getattr(dist.ReduceOp, op))
        return data

    expected = reference(op, inputs)
    for rank, result in enumerate(run_ranks(world_size, body)):
        assert result.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(result, expected, err_msg=f"{op} {dtype} rank {rank}")


@pytest.mark.parametrize("op,expected", [("SUM", [True, True, False]), ("PRODUCT", [False, True, False]),
                                         ("MIN", [False, True, False]), ("MAX", [True, True, False]),
                                         ("BAND", [False, True, False]), ("BOR", [True, True, False]),
                                         ("BXOR", [True, False, False])])
def test_all_reduce_bool(op, expected):
    inputs = [np.array([True, True, False]), np.array([False, True, False])]

    def body(rank):
        data = inputs[rank].copy()
        dist.all_reduce(data, op=getattr(dist.ReduceOp, op))
        return data

    for result in run_ranks(2, body):
        assert result.tolist() == expected


def test_int8_sum_wraps_like_torch():
    def body(rank):
        data = np.array([100, -100, 127], dtype=np.int8)
        dist.all_reduce(data)
        return data

    for result in run_ranks(3, body):
        assert result.tolist() == [44, -44, 125]  # 300 → 44, -300 → -44, 381 → 125 (mod 256)


def test_premul_sum_multiplies_the_sum():
    op = dist._make_nccl_premul_sum(0.5)

    def body(rank):
        data = np.full(4, rank + 1, dtype=np.float32)
        dist.all_reduce(data, op=op)
        return data

    for result in run_ranks(4, body):
        np.testing.assert_array_equal(result, np.full(4, 5.0, dtype=np.float32))  # (1+2+3+4)/2


def test_avg_on_one_rank_and_premul_on_one_rank_still_apply():
    def body(rank):
        a = np.array([3.0, 5.0])
        dist.all_reduce(a, op=dist.ReduceOp.AVG)
        b = np.array([3.0, 5.0])
        dist.all_reduce(b, op=dist._make_nccl_premul_sum(2.0))
        return a, b

    [(a, b)] = run_ranks(1, body)
    assert a.tolist() == [3.0, 5.0] and b.tolist() == [6.0, 10.0]


def test_integer_avg_truncates_toward_zero():
    inputs = [np.array([1, -1, 7, -7], dtype=np.int32), np.array([0, 0, 0, 0], dtype=np.int32)]

    def body(rank):
        data = inputs[rank].copy()
        dist.all_reduce(data, op=dist.ReduceOp.AVG)
        return data

    for result in run_ranks(2, body):
        assert result.tolist() == [0, 0, 3, -3]


@pytest.mark.parametrize("op,dtype", [("MIN", "complex64"), ("MAX", "complex128"),
                                      ("PRODUCT", "complex64"), ("BAND", "float32"),
                                      ("BXOR", "complex64"), ("AVG", "bool"),
                                      ("PREMUL_SUM", "float32")])
def test_reduce_op_dtype_errors(op, dtype):
    def body(rank):
        data = np.zeros(3, dtype=dtype)
        reduce = getattr(dist.ReduceOp, op)
        with pytest.raises((TypeError, ValueError)) as info:
            dist.all_reduce(data, op=reduce)
        return str(info.value)

    for message in run_ranks(2, body):
        assert op in message


@pytest.mark.parametrize("algorithm", message_algorithms("broadcast"))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", [0, 1, 9, 1000])
def test_broadcast_every_root(monkeypatch, algorithm, world_size, count):
    force(monkeypatch, "broadcast", algorithm)

    def body(rank):
        results = []
        for root in range(world_size):
            data = np.arange(count, dtype=np.int64) + (1000 * root if rank == root else -1)
            dist.broadcast(data, src=root)
            results.append(data)
        return results

    for rank, results in enumerate(run_ranks(world_size, body)):
        for root, data in enumerate(results):
            np.testing.assert_array_equal(data, np.arange(count) + 1000 * root,
                                          err_msg=f"rank {rank} root {root}")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_barrier_waits_for_every_rank(world_size):
    import threading
    import time

    arrived: list[int] = []
    lock = threading.Lock()

    def body(rank):
        time.sleep(0.01 * rank)
        with lock:
            arrived.append(rank)
        dist.barrier()
        with lock:
            return len(arrived)

    assert run_ranks(world_size, body) == [world_size] * world_size


def test_collectives_mixed_in_one_program_stay_in_order():
    def body(rank):
        out = []
        for i in range(20):
            x = np.full(5, rank + i, dtype=np.int64)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            y = np.full(3, rank, dtype=np.float32)
            dist.broadcast(y, src=i % 4)
            dist.barrier()
            out.append((int(x[0]), float(y[0])))
        return out

    for result in run_ranks(4, body):
        assert result == [(3 + i, float(i % 4)) for i in range(20)]


def test_non_contiguous_array_result_lands_in_the_view():
    def body(rank):
        base = np.zeros((4, 6), dtype=np.float32)
        view = base[:, ::2]  # strided: not contiguous
        view[...] = rank + 1
        dist.all_reduce(view)
        return base

    for base in run_ranks(3, body):
        assert (base[:, ::2] == 6).all() and (base[:, 1::2] == 0).all()


def test_read_only_array_is_rejected_before_anything_moves():
    def body(rank):
        data = np.ones(3)
        data.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            dist.all_reduce(data)
        dist.broadcast(data, src=rank)  # the root only reads: allowed on that rank only
        return True

    assert run_ranks(1, body) == [True]


# -- shared memory: the same checks with ranks sharing slots (threads over one fabric) ------

SHM_COUNTS = [0, 1, 9, 3000]  # 3000 float64 = 24 KB: six 4 KiB slots' worth → many rounds


def shm_ranks(world_size, body, monkeypatch, algorithm=None, collective="all_reduce"):
    monkeypatch.setenv("ACCORD_SHM_SLOT_BYTES", "4096")
    if algorithm:
        monkeypatch.setenv("ACCORD_ALGORITHM", f"{collective}={algorithm}")
    return run_ranks(world_size, body, fabric=LoopbackFabric(world_size, shared_memory=True))


SHM_ALL_REDUCE = sorted(n for n, a in ALGORITHMS["all_reduce"].items() if a.kind == "shm")


@pytest.mark.parametrize("algorithm", SHM_ALL_REDUCE)
@pytest.mark.parametrize("world_size", [2, 3, 4, 5])
@pytest.mark.parametrize("count", SHM_COUNTS)
def test_shm_all_reduce(monkeypatch, algorithm, world_size, count):
    def body(rank):
        assert dist.group.WORLD.engine.shared
        data = np.arange(count, dtype=np.float64) * world_size + rank
        dist.all_reduce(data)
        more = np.full(7, rank + 1, dtype=np.int32)
        dist.all_reduce(more, op=dist.ReduceOp.PRODUCT)
        avg = np.full(5, rank, dtype=np.float32)
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        return data, more, avg

    expected = np.arange(count) * world_size**2 + world_size * (world_size - 1) / 2
    product = np.prod(np.arange(1, world_size + 1))
    for rank, (data, more, avg) in enumerate(shm_ranks(world_size, body, monkeypatch, algorithm)):
        np.testing.assert_array_equal(data, expected, err_msg=f"rank {rank}")
        assert (more == product).all() and np.allclose(avg, (world_size - 1) / 2)


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("count", SHM_COUNTS)
def test_shm_broadcast_and_barrier(monkeypatch, world_size, count):
    def body(rank):
        out = []
        for root in range(world_size):
            data = np.arange(count, dtype=np.int64) + (1000 * root if rank == root else -1)
            dist.broadcast(data, src=root)
            dist.barrier()
            out.append(data)
        return out

    for rank, results in enumerate(shm_ranks(world_size, body, monkeypatch)):
        for root, data in enumerate(results):
            np.testing.assert_array_equal(data, np.arange(count) + 1000 * root)


def test_shm_results_are_bit_identical_on_every_rank(monkeypatch):
    def body(rank):
        rng = np.random.default_rng(rank)
        data = rng.standard_normal(2000).astype(np.float32)
        dist.all_reduce(data)
        return data

    results = shm_ranks(4, body, monkeypatch, "shm_two_shot")
    for other in results[1:]:
        assert other.tobytes() == results[0].tobytes()


def test_shm_and_tcp_groups_side_by_side(monkeypatch):
    monkeypatch.setenv("ACCORD_TRANSPORT", "tcp")

    def body(rank):
        tcp_world = dist.group.WORLD
        assert not tcp_world.engine.shared
        x = np.ones(3)
        dist.all_reduce(x)
        return float(x[0])

    assert shm_ranks(3, body, monkeypatch) == [3.0] * 3


def test_shm_mismatch_is_detected_from_the_fingerprint(monkeypatch):
    def body(rank):
        with pytest.raises(dist.CollectiveMismatchError, match="all_reduce #1"):
            dist.all_reduce(np.ones(4 if rank == 0 else 5))
        return True

    monkeypatch.setenv("ACCORD_SHM_SLOT_BYTES", "4096")
    assert run_ranks(2, body, fabric=LoopbackFabric(2, shared_memory=True), expect_failure=True) == [True, True]
