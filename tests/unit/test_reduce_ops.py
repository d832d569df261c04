"""ReduceOp's torch-compatible surface and the kernels' dtype rules."""

from __future__ import annotations

import numpy as np
import pytest

import accord as dist
from accord.reduce_ops import RedOpType, ReduceOp, as_reduce_op, make_kernel


def test_names_values_and_reprs_match_torch():
    assert [m.name for m in RedOpType] == ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR",
                                           "BXOR", "PREMUL_SUM"]
    assert int(ReduceOp.SUM) == 0 and int(ReduceOp.PREMUL_SUM) == 8
    assert str(ReduceOp.SUM) == "RedOpType.SUM" and repr(ReduceOp.MAX) == "<RedOpType.MAX: 4>"
    assert ReduceOp(ReduceOp.SUM) == ReduceOp.SUM and ReduceOp.RedOpType is RedOpType


def test_deprecated_reduce_op_alias_warns():
    with pytest.warns(FutureWarning, match="deprecated"):
        assert dist.reduce_op.SUM == ReduceOp.SUM


def test_supports_complex_follows_torch():
    assert dist.supports_complex(ReduceOp.SUM) and dist.supports_complex(ReduceOp.AVG)
    for op in (ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT, ReduceOp.BAND):
        assert not dist.supports_complex(op)


def test_as_reduce_op_rejects_garbage_and_bare_premul():
    with pytest.raises(TypeError):
        as_reduce_op("sum")
    with pytest.raises(ValueError, match="_make_nccl_premul_sum"):
        as_reduce_op(ReduceOp.PREMUL_SUM)
    with pytest.raises(ValueError):
        ReduceOp(42)
    op = dist._make_nccl_premul_sum(np.float32(0.5))
    assert as_reduce_op(op) is op and op.factor == 0.5


def _bf16(values):
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_sum_rounds_to_nearest_even():
    kernel = make_kernel(ReduceOp(ReduceOp.SUM), np.dtype(np.uint16), "bfloat16")
    acc = _bf16([1.0, 256.0, -2.5])
    kernel.combine(acc, _bf16([2.0, 1.0, 0.5]))
    # 256 + 1 = 257 is not representable in bfloat16 (8 bits of mantissa): ties to even → 256
    assert _from_bf16(acc).tolist() == [3.0, 256.0, -2.0]


def test_bfloat16_avg_and_nan():
    kernel = make_kernel(ReduceOp(ReduceOp.AVG), np.dtype(np.uint16), "bfloat16")
    acc = _bf16([6.0, np.nan])
    kernel.finalize(acc, 3)
    result = _from_bf16(acc)
    assert result[0] == 2.0 and np.isnan(result[1])


def test_kernels_are_cached_per_op_and_dtype():
    a = make_kernel(ReduceOp(ReduceOp.MAX), np.dtype(np.float32), "float32")
    assert a is make_kernel(ReduceOp(ReduceOp.MAX), np.dtype(np.float32), "float32")
    b = make_kernel(dist._make_nccl_premul_sum(2.0), np.dtype(np.float32), "float32")
    c = make_kernel(dist._make_nccl_premul_sum(3.0), np.dtype(np.float32), "float32")
    assert b is not c
