"""ReduceOp (torch's names and values) and the in-place NumPy kernels that apply it.

Owns: ``ReduceOp``, ``RedOpType``, the deprecated ``reduce_op`` alias, ``supports_complex``,
the dtype rules of each op, and the element-wise kernels ``combine`` (acc ∘= incoming) and
``finalize`` (AVG's division, PREMUL_SUM's factor). Must not know about groups or transports.

bfloat16 (which NumPy lacks) travels as its raw 16-bit pattern in a ``uint16`` array; the
kernels widen it to float32, combine, and round back to nearest-even, as torch does per step.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError


class RedOpType(enum.IntEnum):
    """The operation codes, with torch's numbering."""

    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8

    def __repr__(self) -> str:
        return f"<RedOpType.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"RedOpType.{self.name}"


_RedOpType = RedOpType  # for annotations inside ReduceOp, whose attribute RedOpType shadows the name


class ReduceOp:
    """An enum-like class of reduction operations, as ``torch.distributed.ReduceOp``.

    ``ReduceOp.SUM`` etc. are ``RedOpType`` members; ``ReduceOp(ReduceOp.SUM)`` makes an
    instance, which every collective accepts too. PREMUL_SUM needs a factor: build it with
    ``_make_nccl_premul_sum(factor)`` (torch's name).
    """

    RedOpType = RedOpType
    SUM = RedOpType.SUM
    AVG = RedOpType.AVG
    PRODUCT = RedOpType.PRODUCT
    MIN = RedOpType.MIN
    MAX = RedOpType.MAX
    BAND = RedOpType.BAND
    BOR = RedOpType.BOR
    BXOR = RedOpType.BXOR
    PREMUL_SUM = RedOpType.PREMUL_SUM

    __slots__ = ("op", "factor")
    op: _RedOpType
    factor: float | None

    def __init__(self, op: _RedOpType | ReduceOp | int = RedOpType.SUM, factor: float | None = None) -> None:
        if isinstance(op, ReduceOp):
            if factor is None:
                factor = op.factor
            op = op.op
        try:
            self.op = RedOpType(int(op))
        except (ValueError, TypeError):
            raise ArgumentError(
                f"unknown reduce op {op!r}; use one of {[m.name for m in RedOpType]}"
            ) from None
        self.factor = factor

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ReduceOp):
            return self.op == other.op and self.factor == other.factor
        if isinstance(other, (RedOpType, int)) and not isinstance(other, bool):
            return self.factor is None and int(self.op) == int(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((int(self.op), self.factor))

    def __repr__(self) -> str:
        extra = f", factor={self.factor}" if self.factor is not None else ""
        return f"ReduceOp({self.op.name}{extra})"


def _make_nccl_premul_sum(factor: Any) -> ReduceOp:
    """PREMUL_SUM with its factor: the result is factor × Σ inputs (torch's name)."""
    try:
        value = float(factor.item() if hasattr(factor, "item") else factor)
    except (TypeError, ValueError):
        raise ArgumentTypeError(
            f"premul_sum factor must be a number or a one-element tensor, got {factor!r}"
        ) from None
    return ReduceOp(RedOpType.PREMUL_SUM, value)


_PLAIN: dict[RedOpType, ReduceOp] = {
    member: ReduceOp(member) for member in RedOpType if member != RedOpType.PREMUL_SUM
}


class _DeprecatedReduceOp:
    """``torch.distributed.reduce_op``: the old name; warns and forwards to ReduceOp."""

    def __getattr__(self, name: str) -> Any:
        warnings.warn(
            "accord.reduce_op is deprecated (as torch.distributed.reduce_op); use accord.ReduceOp",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(ReduceOp, name)


reduce_op = _DeprecatedReduceOp()

_NO_COMPLEX = {RedOpType.MAX, RedOpType.MIN, RedOpType.PRODUCT, RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR}
_BITWISE = {RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR}


def supports_complex(reduceOp: RedOpType | ReduceOp) -> bool:  # noqa: N803 (torch's name)
    """Whether complex tensors may be reduced with this op (torch's rule)."""
    return as_reduce_op(reduceOp).op not in _NO_COMPLEX


def as_reduce_op(op: Any) -> ReduceOp:
    """Normalize what a user passed as ``op=`` into a ReduceOp instance.

    Raises:
        TypeError: not a ReduceOp, RedOpType or int.
        ValueError: PREMUL_SUM without a factor.
    """
    cached = _PLAIN.get(op) if op.__class__ is RedOpType else None
    if cached is not None:
        return cached
    if isinstance(op, ReduceOp):
        reduce = op
    elif isinstance(op, (RedOpType, int)) and not isinstance(op, bool):
        reduce = ReduceOp(op)
    else:
        raise ArgumentTypeError(f"op must be a ReduceOp (e.g. ReduceOp.SUM), got {op!r}")
    if reduce.op == RedOpType.PREMUL_SUM and reduce.factor is None:
        raise ArgumentTypeError("ReduceOp.PREMUL_SUM needs a factor: use _make_nccl_premul_sum(factor)")
    return reduce


# -- kernels -----------------------------------------------------------------------------------

Combine = Callable[[np.ndarray, np.ndarray], None]

_UFUNCS: dict[RedOpType, np.ufunc] = {
    RedOpType.SUM: np.add,
    RedOpType.AVG: np.add,
    RedOpType.PREMUL_SUM: np.add,
    RedOpType.PRODUCT: np.multiply,
    RedOpType.MIN: np.minimum,
    RedOpType.MAX: np.maximum,
    RedOpType.BAND: np.bitwise_and,
    RedOpType.BOR: np.bitwise_or,
    RedOpType.BXOR: np.bitwise_xor,
}
# On bool, arithmetic ops become logic, as torch computes them on bool tensors.
_BOOL_UFUNCS: dict[RedOpType, np.ufunc] = {
    RedOpType.SUM: np.logical_or,
    RedOpType.PRODUCT: np.logical_and,
    RedOpType.MIN: np.logical_and,
    RedOpType.MAX: np.logical_or,
    RedOpType.BAND: np.logical_and,
    RedOpType.BOR: np.logical_or,
    RedOpType.BXOR: np.logical_xor,
}


def check_dtype(op: ReduceOp, dtype: np.dtype, dtype_name: str) -> None:
    """Raise TypeError if ``op`` cannot reduce this element type (before any byte moves)."""
    kind = dtype.kind
    if dtype_name == "bfloat16":
        kind = "f"
    if kind == "c" and op.op in _NO_COMPLEX:
        raise ArgumentTypeError(
            f"ReduceOp.{op.op.name} is not defined for complex {dtype_name}: "
            f"use SUM, AVG or PREMUL_SUM (see supports_complex)"
        )
    if op.op in _BITWISE and kind not in "biu":
        raise ArgumentTypeError(f"ReduceOp.{op.op.name} needs an integer or bool dtype, got {dtype_name}")
    if kind == "b" and op.op in (RedOpType.AVG, RedOpType.PREMUL_SUM):
        raise ArgumentTypeError(f"ReduceOp.{op.op.name} is not defined for bool tensors")
    if kind not in "biufc":
        raise ArgumentTypeError(f"cannot reduce elements of dtype {dtype_name}")


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values: np.ndarray, out: np.ndarray) -> None:
    """Round float32 to bfloat16 bit patterns, nearest-even; NaN stays a quiet NaN."""
    bits = values.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))
    result = (rounded >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        result[nan] = ((bits[nan] >> 16) | np.uint32(0x0040)).astype(np.uint16)
    out[...] = result


class Kernel:
    """The element-wise work of one ReduceOp on one element type.

    ``combine(acc, incoming)`` folds ``incoming`` into ``acc`` in place; ``finalize(acc, n)``
    applies what happens once after all n inputs are combined (AVG's division, PREMUL_SUM's
    factor) and is a no-op function for the other ops (cheap on the hot path).
    """

    __slots__ = ("op", "combine", "combine_into", "bfloat16", "finalize", "needs_finalize", "ufunc")

    def __init__(
        self,
        op: ReduceOp,
        combine: Combine,
        bfloat16: bool = False,
        combine_into: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
        ufunc: Any = None,
    ) -> None:
        self.op = op
        self.combine = combine
        #: The NumPy ufunc that ``combine`` applies, when it is one on the element type itself
        #: (``ufunc(a, b, out=out)``); None for bfloat16 (widened to float32 and back).
        self.ufunc = ufunc
        # combine_into(out, a, b): out = a ∘ b, one pass instead of a copy then a combine
        self.combine_into = combine_into or self._copy_then_combine
        self.bfloat16 = bfloat16
        if op.op == RedOpType.AVG:
            self.finalize = self._average
        elif op.op == RedOpType.PREMUL_SUM:
            self.finalize = self._premultiply
        else:
            self.finalize = _nothing
        self.needs_finalize = self.finalize is not _nothing

    def _copy_then_combine(self, out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        out[...] = a
        self.combine(out, b)

    def _average(self, acc: np.ndarray, world_size: int) -> None:
        self._scale(acc, lambda x: _divide(x, world_size))

    def _premultiply(self, acc: np.ndarray, world_size: int) -> None:
        factor = self.op.factor
        assert factor is not None
        self._scale(acc, lambda x: _multiply(x, factor))

    def _scale(self, acc: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        if self.bfloat16:
            _f32_to_bf16(fn(_bf16_to_f32(acc)).astype(np.float32), acc)
        else:
            acc[...] = fn(acc)


def _nothing(acc: np.ndarray, world_size: int) -> None:
    """SUM, PRODUCT, MIN, MAX and the bitwise ops need nothing after combining."""


def _divide(x: np.ndarray, n: int) -> np.ndarray:
    if x.dtype.kind in "iu":
        # Integer AVG truncates toward zero (as NCCL's integer average does).
        q = x // n
        if x.dtype.kind == "i":
            q += (x % n != 0) & (x < 0)
        return q
    return (x / n).astype(x.dtype, copy=False)


def _multiply(x: np.ndarray, factor: float) -> np.ndarray:
    if x.dtype.kind in "iu":
        return (x * factor).astype(x.dtype)
    return (x * factor).astype(x.dtype, copy=False)


_KERNELS: dict[tuple[int, float | None, str], Kernel] = {}


def make_kernel(op: ReduceOp, dtype: np.dtype, dtype_name: str) -> Kernel:
    """The kernel for ``op`` on arrays of ``dtype`` (bfloat16 given as uint16 + its name).

    Raises:
        TypeError: the op is not defined for this element type.
    """
    key = (op.op, op.factor, dtype_name)  # the name says the dtype (bfloat16: uint16 bits)
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS.setdefault(key, _build_kernel(op, dtype, dtype_name))
    return kernel


def _build_kernel(op: ReduceOp, dtype: np.dtype, dtype_name: str) -> Kernel:
    check_dtype(op, dtype, dtype_name)
    if dtype_name == "bfloat16":
        ufunc = _UFUNCS[op.op]

        def combine_bf16(acc: np.ndarray, incoming: np.ndarray) -> None:
            _f32_to_bf16(ufunc(_bf16_to_f32(acc), _bf16_to_f32(incoming)), acc)

        return Kernel(op, combine_bf16, bfloat16=True)
    ufunc = (_BOOL_UFUNCS if dtype.kind == "b" else _UFUNCS)[op.op]

    def combine(acc: np.ndarray, incoming: np.ndarray) -> None:
        ufunc(acc, incoming, out=acc)

    def combine_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        ufunc(a, b, out=out)

    return Kernel(op, combine, combine_into=combine_into, ufunc=ufunc)
