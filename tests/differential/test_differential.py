"""Differential tests: every script gives the same per-rank results on torch.distributed (gloo)
and on accord: with NumPy arrays (backend=None) over shared memory and over TCP, and with torch
tensors (backend="gloo") over TCP with the bandwidth algorithms (see runner.IMPLEMENTATIONS).

Each implementation runs once per world size (one job: all its scripts in one process group,
with the other differential modules' scripts: runner.SharedJobs), cached for the session;
the tests then compare script by script. Where gloo errors or lacks the feature (integer
AVG, PREMUL_SUM, int16/uint16/uint32/uint64, p2p futures, strided views, mismatched
counts), accord is checked against closed forms instead.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from . import runner, scripts  # noqa: E402 — after the importorskip

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

WORLD_SIZES = (2, 3, 4)
ACCORD = ("accord-numpy", "accord-numpy-tcp", "accord-torch", "accord-mpi")
ALL_IMPLS = ("torch-gloo", *ACCORD)
wanted = runner.wanted


#: The jobs this module asks for, each shared with the other differential modules that do.
SHARED_JOBS = runner.SharedJobs(runner.names_for, [
    (ws, impl) for ws in WORLD_SIZES for impl in (*ALL_IMPLS, "torch-accord") if wanted(ws, impl)])


@pytest.fixture(scope="module")
def runs() -> Callable[[str, int], runner.JobResult]:
    """``runs(impl, world_size)``: the job's results, run at most once per session."""
    return SHARED_JOBS.cache()


results = runner.script_results

def differences(expected: Any, got: Any, path: str = "") -> list[str]:
    """Where two plain values differ, as 'path: expected … got …' lines."""
    if isinstance(expected, dict) and isinstance(got, dict):
        lines = []
        for key in sorted(expected.keys() | got.keys()):
            if key not in got:
                lines.append(f"{path}.{key}: missing")
            elif key not in expected:
                lines.append(f"{path}.{key}: unexpected")
            else:
                lines += differences(expected[key], got[key], f"{path}.{key}")
        return lines
    if (isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got)
            and any(isinstance(x, (dict, list)) for x in expected)):
        return [line for i, (e, g) in enumerate(zip(expected, got))
                for line in differences(e, g, f"{path}[{i}]")]
    if type(expected) is not type(got) or expected != got:
        return [f"{path}: expected {expected!r}, got {got!r}"]
    return []


def assert_same(expected: list[Any], got: list[Any], what: str) -> None:
    if got != expected:
        lines = [f"rank {r}{line}" for r, (e, g) in enumerate(zip(expected, got))
                 for line in differences(e, g)]
        if len(got) != len(expected):
            lines.insert(0, f"{len(got)} ranks reported, expected {len(expected)}")
        pytest.fail(f"{what}:\n  " + "\n  ".join(lines[:25]), pytrace=False)


# -- accord == torch.distributed (gloo), script by script --------------------------------------

# Where accord is known to differ from torch: strict, so that a fix shows up as XPASS.
KNOWN_DIFFERENCES: dict[str, str] = {}


def case(world_size: int, impl: str, name: str, known: dict[str, str] | None = None) -> Any:
    reason = (known or {}).get(name)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(world_size, impl, name, id=f"ws{world_size}-{impl}-{name}", marks=marks)


def _differential_cases() -> list[Any]:
    on_gloo = set(runner.names_for("torch-gloo"))
    return [case(world_size, impl, name, KNOWN_DIFFERENCES)
            for world_size in WORLD_SIZES for impl in ACCORD if wanted(world_size, impl)
            for name in runner.names_for(impl) if name in on_gloo]


@pytest.mark.parametrize(("world_size", "impl", "name"), _differential_cases())
def test_same_results_as_torch_gloo(runs, world_size: int, impl: str, name: str) -> None:
    expected = results(runs("torch-gloo", world_size), name)
    got = results(runs(impl, world_size), name)
    assert_same(expected, got,
                f"{impl} differs from torch-gloo on {name!r} at world size {world_size}")


# torch.distributed's own API on backend "accord" (init_process_group("accord")): every script
# torch runs gives gloo's results.
TORCH_API_KNOWN_DIFFERENCES: dict[str, str] = {}


def _torch_api_cases() -> list[Any]:
    return [case(world_size, "torch-accord", name, TORCH_API_KNOWN_DIFFERENCES)
            for world_size in WORLD_SIZES for name in runner.names_for("torch-accord")
            if wanted(world_size, "torch-accord")]


@pytest.mark.parametrize(("world_size", "impl", "name"), _torch_api_cases())
def test_torch_api_on_backend_accord_same_as_gloo(runs, world_size: int, impl: str, name: str) -> None:
    expected = results(runs("torch-gloo", world_size), name)
    got = results(runs(impl, world_size), name)
    assert_same(expected, got, f"torch.distributed on backend accord differs from gloo on "
                               f"{name!r} at world size {world_size}")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_accord_numpy_never_imports_torch(runs, world_size: int) -> None:
    for impl in (i for i in ACCORD if wanted(world_size, i)):
        expected = runner.IMPLEMENTATIONS[impl].torch_tensors
        assert runs(impl, world_size).torch_imported == [expected] * world_size, impl


# -- closed forms (the docs' examples; gloo is checked too, as a check of the scripts) ---------

def each_job(world_sizes: tuple[int, ...] = WORLD_SIZES, impls: tuple[str, ...] = ALL_IMPLS) -> Any:
    jobs = [(ws, impl) for ws in world_sizes for impl in impls if wanted(ws, impl)]
    return pytest.mark.parametrize(("world_size", "impl"), jobs, ids=[f"ws{ws}-{impl}" for ws, impl in jobs])


def values_of(snapshot: dict) -> Any:
    return snapshot["values"]


@each_job()
def test_docs_all_reduce_examples(runs, world_size: int, impl: str) -> None:
    """[1, 2] + 2 * rank summed: [4, 6] on 2 ranks (the docs), [n², n² + n] on n."""
    n = world_size
    job = runs(impl, n)
    for rank, res in enumerate(results(job, "docs_all_reduce_int64")):
        assert values_of(res["before"]) == [1 + 2 * rank, 2 + 2 * rank]
        assert res["after"] == {"values": [n * n, n * n + n], "dtype": "int64", "shape": [2]}
        assert res["returned"] is None
    for res in results(job, "docs_all_reduce_cfloat"):
        assert res["after"] == {"values": [[n * n, n * n], [n * n + n, n * n + n]],
                                "dtype": "complex64", "shape": [2]}
    if n == 2:
        assert values_of(results(job, "docs_all_reduce_int64")[0]["after"]) == [4, 6]


@each_job()
def test_broadcast_from_every_root(runs, world_size: int, impl: str) -> None:
    for res in results(runs(impl, world_size), "broadcast_every_root"):
        for root in range(world_size):
            got = res[f"root{root}"]
            assert values_of(got["result"]) == [10 * root, 10 * root + 1, 10 * root + 2]
            assert got["returned"] is None
    for res in results(runs(impl, world_size), "docs_broadcast_params"):
        assert [values_of(p) for p in res["params"]] == [[0.5, 1.0, 1.5, 2.0],
                                                         [[1.0, 2.0], [3.0, 4.0]]]


@each_job()
def test_docs_point_to_point(runs, world_size: int, impl: str) -> None:
    """Rank 0 sends tensor + 1 to rank 1; recv returns the sender's rank."""
    job = runs(impl, world_size)
    for name in ("docs_p2p_blocking", "docs_p2p_nonblocking"):
        res = results(job, name)
        assert values_of(res[0]["data"]) == [1.0] and values_of(res[1]["data"]) == [1.0]
        assert all(values_of(r["data"]) == [0.0] for r in res[2:])
    assert results(job, "docs_p2p_blocking")[1]["recv_returned"] == 0
    assert results(job, "docs_p2p_nonblocking")[1] == {
        "wait": True, "completed": True,
        "data": {"values": [1.0], "dtype": "float32", "shape": [1]}}
    got = results(job, "recv_any_source")
    assert got[0]["got"] == [[r, 10 * r + 1] for r in range(1, world_size)]
    assert got[-1]["irecv_got"] == [[r, [r, 2 * r]] for r in range(world_size - 1)]


def wrap(value: int, dtype: str) -> int:
    bits = int("".join(c for c in dtype if c.isdigit()))
    if dtype.startswith("u"):
        return value % (1 << bits)
    return (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))


def to_dtype(value: Any, dtype: str) -> Any:
    """A Python float rounded to ``dtype`` (overflow → inf), as a Python float."""
    return torch.tensor(value, dtype=torch.float64).to(getattr(torch, dtype)).item()


_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "SUM": lambda a, b: a + b, "PRODUCT": lambda a, b: a * b, "MIN": min, "MAX": max,
    "BAND": lambda a, b: a & b, "BOR": lambda a, b: a | b, "BXOR": lambda a, b: a ^ b,
}
_BOOL_COMBINE: dict[str, Callable[[bool, bool], bool]] = {
    "SUM": lambda a, b: a or b, "PRODUCT": lambda a, b: a and b, "MIN": lambda a, b: a and b,
    "MAX": lambda a, b: a or b, "BAND": lambda a, b: a and b, "BOR": lambda a, b: a or b,
    "BXOR": lambda a, b: a != b,
}


def reference(dtype: str, op: str, inputs: list[list[Any]]) -> list[Any]:
    """The closed-form all_reduce of per-rank ``inputs`` (exact, then wrapped or rounded)."""
    n = len(inputs)
    out = []
    for column in zip(*inputs):
        if dtype == "bool":
            out.append(reduce(_BOOL_COMBINE[op], column))
        elif dtype.startswith("complex"):
            total = sum(column)
            if op == "AVG":
                total = total / n
            out.append([total.real, total.imag])
        elif dtype.startswith("float") or dtype == "bfloat16":
            if op == "AVG":
                total = math.fsum(column) / n
            else:
                total = reduce(_COMBINE[op], column)
            out.append(to_dtype(total, dtype))
        else:
            out.append(wrap(reduce(_COMBINE[op], column), dtype))
    return out


def _sweep_cases() -> list[Any]:
    return [case(world_size, impl, name) for world_size in WORLD_SIZES for impl in ALL_IMPLS
            if wanted(world_size, impl)
            for name in runner.names_for(impl) if name.startswith("all_reduce_ops_")]


@pytest.mark.parametrize(("world_size", "impl", "name"), _sweep_cases())
def test_all_reduce_ops_closed_form(runs, world_size: int, impl: str, name: str) -> None:
    """Every op on every dtype against Python arithmetic (gloo too: it checks the reference;
    int16/uint16/uint32/uint64, which gloo lacks, are checked here only)."""
    dtype = name.removeprefix("all_reduce_ops_")
    inputs = [scripts.VALUES[dtype](r, world_size) for r in range(world_size)]
    for rank, res in enumerate(results(runs(impl, world_size), name)):
        for op, got in res.items():
            assert got["returned"] is None
            assert got["result"]["dtype"] == dtype
            assert got["result"]["values"] == reference(dtype, op, inputs), f"rank {rank}, {op}"


@each_job()
def test_integer_overflow_wraps(runs, world_size: int, impl: str) -> None:
    """int8 (and others) SUM/PRODUCT wrap modulo 2**bits, as torch does."""
    res = results(runs(impl, world_size), "all_reduce_overflow_wraps")
    cases = {  # the script's inputs, per rank
        "int8-SUM": lambda r: [120, -120, 127, -128, 64 + r, r],
        "int8-PRODUCT": lambda r: [100, -100, 16 + r, -128],
        "uint8-SUM": lambda r: [255, 200 + r, 128],
        "uint8-PRODUCT": lambda r: [16, 255 - r, 3],
        "int32-SUM": lambda r: [2**31 - 1, -2**31, 2**30 + r],
        "int64-SUM": lambda r: [2**63 - 1, -2**63, 2**62 + r],
        "int64-PRODUCT": lambda r: [2**32 + r, -(2**31)],
    }
    for key, inputs in cases.items():
        dtype, op = key.split("-")
        expected = reference(dtype, op, [inputs(r) for r in range(world_size)])
        for rank_result in res:
            assert rank_result[key] == {"values": expected, "dtype": dtype,
                                        "shape": [len(expected)]}, key


# -- accord only: where gloo errors or lacks the feature ---------------------------------------

@each_job(impls=ACCORD)
def test_integer_avg_truncates_toward_zero(runs, world_size: int, impl: str) -> None:
    """gloo: "result type Float can't be cast to the desired output type Long". accord divides
    the exact sum by the size, truncating toward zero (NCCL's integer average)."""
    n = world_size
    signed = [[r + 1, -(r + 2), 3 * r - 4, 7, -7 * r] for r in range(n)]
    unsigned = [[r + 1, 2 * r, 60 - r] for r in range(n)]
    for res in results(runs(impl, n), "avg_integer"):
        for dtype in ("int64", "int32", "int8"):
            expected = [wrap(int(sum(col) / n), dtype) for col in zip(*signed)]
            assert res[dtype] == {"values": expected, "dtype": dtype, "shape": [5]}
        assert res["uint8"]["values"] == [sum(col) // n for col in zip(*unsigned)]


@each_job(impls=ACCORD)
def test_premul_sum(runs, world_size: int, impl: str) -> None:
    """gloo: "Cannot use ReduceOp.PREMUL_SUM with Gloo". The result is factor × Σ inputs."""
    n = world_size
    inputs = [[r + 1.0, -(r + 2.0), 0.5 * r] for r in range(n)]
    expected = [2.5 * sum(col) for col in zip(*inputs)]
    for res in results(runs(impl, n), "premul_sum"):
        for dtype in ("float64", "float32", "float16"):
            assert res[dtype] == {"values": expected, "dtype": dtype, "shape": [3]}
        assert values_of(res["tensor_factor"]) == [0.25 * 4.0 * sum(range(n)), 0.25 * n]


@each_job(impls=ACCORD)
def test_p2p_get_future(runs, world_size: int, impl: str) -> None:
    """gloo: "Work::getFuture not implemented" for isend/irecv; accord completes the future."""
    res = results(runs(impl, world_size), "p2p_future")
    assert res[0]["send_done"] is True
    assert res[-1]["recv_done"] is True
    assert values_of(res[-1]["data"]) == [41, 1]


@each_job(impls=ACCORD)
def test_strided_views(runs, world_size: int, impl: str) -> None:
    """Only the view's elements change (gloo 2.13 writes numel contiguous elements instead)."""
    n = world_size
    for rank, res in enumerate(results(runs(impl, n), "strided_views")):
        summed = [sum(10 * r + i for r in range(n)) for i in range(0, 8, 2)]
        assert values_of(res["all_reduce_view"]) == summed
        assert values_of(res["all_reduce_base"]) == [
            summed[i // 2] if i % 2 == 0 else 10 * rank + i for i in range(8)]
        root_view = [10.0 * (n - 1) + i for i in range(1, 8, 3)]
        assert values_of(res["broadcast_view"]) == root_view
        assert values_of(res["broadcast_base"]) == [
            10.0 * (n - 1) + i if i % 3 == 1 else 10.0 * rank + i for i in range(8)]


@each_job(impls=ACCORD)
def test_mismatched_counts_fail_on_every_rank(runs, world_size: int, impl: str) -> None:
    """The docs require the same number of elements on every rank; gloo hangs until its
    timeout when they differ. accord raises a DistError on every rank."""
    for res in results(runs(impl, world_size), "mismatched_counts"):
        assert res["raised"] is not None and res["is_dist_error"] is True, res
        assert values_of(res["world_after"]) == [sum(range(world_size))]
