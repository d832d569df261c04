"""What the torch backend accepts, checked in the caller's thread before anything is sent.

Owns: the tensor checks (a list of CPU tensors, dense — or sparse COO where the operation
takes it —, of an element type accord can send), torch's ReduceOp → accord's, and the
zero-copy NumPy view of a plain tensor (so that accord's short shared-memory path applies).
Errors are accord's ``ArgumentError``: a ValueError and a RuntimeError both, so ``except
RuntimeError`` (torch's habit) and ``except ValueError`` (accord's) both catch them. Must not
know about groups or the store.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import torch

from ...arrays import tensor_memory
from ...errors import ArgumentError
from ...reduce_ops import RedOpType, ReduceOp, _make_nccl_premul_sum

_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}
_SUPPORTED = "bool, (u)int8-64, float16, bfloat16, float32, float64, complex64, complex128"


def one_tensor_error(op: str, tensors: Any) -> ArgumentError:
    """The error for a call given more (or fewer) tensors than the one torch's API passes."""
    return ArgumentError(
        f"{op}: accord's torch backend takes exactly one tensor per call "
        f"(got {len(tensors)}); torch's own API always passes one"
    )


def check_tensors(tensors: Any, what: str, sparse_ok: bool = False) -> None:
    """Raise ArgumentError unless ``tensors`` is a list of tensors accord can send."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise ArgumentError(f"{what}: expected a list of tensors, got {type(tensors).__name__}")
    for tensor in tensors:
        check_dense(tensor, what, sparse_ok)


def check_dense(tensor: Any, what: str, sparse_ok: bool = False) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ArgumentError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_cpu:
        raise ArgumentError(
            f"{what}: a tensor on {tensor.device}, but the accord backend takes CPU tensors "
            f"only. Move it with .cpu(), or run this group on a backend for that device "
            f"(nccl for CUDA)"
        )
    if tensor.layout is not torch.strided and not (sparse_ok and tensor.layout is torch.sparse_coo):
        takes = (
            "dense (strided) tensors, and sparse COO for all_reduce"
            if not sparse_ok
            else "dense (strided) and sparse COO tensors"
        )
        raise ArgumentError(f"{what}: a tensor with layout {tensor.layout}; the accord backend takes {takes}")
    if tensor.dtype not in _DTYPES:
        raise ArgumentError(
            f"{what}: a tensor of dtype {tensor.dtype}, which the accord backend "
            f"cannot send; it takes {_SUPPORTED}"
        )


def as_array(tensor: torch.Tensor) -> Any:
    """A NumPy view of a plain contiguous tensor (same memory, storage left resizable), shaped
    as the tensor, else the tensor itself (accord's array adapter copes with bfloat16 and
    strided or conjugate views)."""
    if tensor.dtype is torch.bfloat16 or not tensor.is_contiguous() or tensor.is_conj() or tensor.is_neg():
        return tensor
    flat = tensor_memory(tensor)
    return flat if tensor.dim() == 1 else flat.reshape(tensor.shape)


#: Plain element types whose memory NumPy reads as is (the blocking fast path's).
_PLAIN_TYPESTR = {
    torch.float32: "<f4",
    torch.float64: "<f8",
    torch.float16: "<f2",
    torch.int64: "<i8",
    torch.int32: "<i4",
    torch.int16: "<i2",
    torch.int8: "|i1",
    torch.uint8: "|u1",
    torch.bool: "|b1",
}
_views: dict[tuple[int, int, Any], np.ndarray] = {}
_MAX_VIEWS = 256


def plain_array(tensor: Any) -> np.ndarray | None:
    """A NumPy array over a plain (CPU, dense, contiguous, non-complex, not negated) tensor's
    memory, or None for anything else. The blocking fast path of the hot collectives.

    Arrays are cached by (address, length, dtype) *without* holding the tensor: one is used
    only while the caller holds a live tensor with that very memory, so it never outlives
    what it points to in use; the cache is bounded. A cached entry exists only for a plain
    dtype and a strided layout (a tensor without strided storage has no ``data_ptr``), so a
    hit needs only the checks that a view of the same memory can fail: device, contiguity,
    the negation bit.
    """
    if type(tensor) is not _TENSOR:
        return None
    try:
        key = (tensor.data_ptr(), tensor.numel(), tensor.dtype)
    except RuntimeError:  # sparse, mkldnn…: no strided storage
        return None
    array = _views.get(key)
    if array is None:
        typestr = _PLAIN_TYPESTR.get(key[2])
        if typestr is None or tensor.layout is not _STRIDED or not tensor.is_cpu:
            return None  # (a meta tensor's data_ptr is 0)
        if len(_views) >= _MAX_VIEWS:
            _views.clear()
        array = _views[key] = _unowned_view(key[0], key[1], typestr)
    if tensor.is_cpu and tensor.is_contiguous() and not tensor.is_neg():
        return array
    return None


_TENSOR = torch.Tensor
_STRIDED = torch.strided


def _unowned_view(address: int, count: int, typestr: str) -> np.ndarray:
    """A 1-D array over ``count`` elements at ``address`` (owning nothing). Through a ctypes
    buffer of a cached type: 0.3 µs, against 0.9 for ``__array_interface__`` — this runs
    for every call whose tensor is new, as a functional collective's output (a fresh clone)
    always is."""
    dtype = _NP_DTYPES.get(typestr)
    if dtype is None:
        dtype = _NP_DTYPES[typestr] = np.dtype(typestr)
    if count == 0:
        return np.empty(0, dtype=dtype)
    nbytes = count * dtype.itemsize
    buffer_type = _BUFFER_TYPES.get(nbytes)
    if buffer_type is None:
        if len(_BUFFER_TYPES) >= _MAX_VIEWS:
            _BUFFER_TYPES.clear()
        buffer_type = _BUFFER_TYPES[nbytes] = ctypes.c_char * nbytes
    return np.frombuffer(buffer_type.from_address(address), dtype)  # type: ignore[arg-type]  # (a ctypes array is a buffer)


_NP_DTYPES: dict[str, np.dtype] = {}
_BUFFER_TYPES: dict[int, Any] = {}  # nbytes → ctypes.c_char * nbytes (making one costs 5 µs)


def fast_op(op: Any) -> RedOpType | None:
    """accord's op for torch's plain ReduceOps (not PREMUL_SUM), by their value; else None.
    SUM is asked first by comparison (0.15 µs), not through ``op.op.value`` (1 µs of pybind)."""
    if op == _SUM_TYPE:
        return _SUM
    return _BY_VALUE.get(op.op.value)


_BY_NAME = {
    name: ReduceOp(RedOpType[name]) for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
}
#: fast_op's answers are accord's RedOpType members (what ``accord.ReduceOp.SUM`` is): an
#: IntEnum hashes in C, so the short path's plan lookup costs what a native call's does.
_BY_VALUE = {int(RedOpType[name]): RedOpType[name] for name in _BY_NAME}
_SUM_TYPE = torch.distributed.ReduceOp.SUM
_SUM = RedOpType.SUM


def reduce_op(op: Any, tensor: torch.Tensor | None, what: str) -> ReduceOp:
    """torch's ReduceOp (an instance, a RedOpType, or PREMUL_SUM with its factor) → accord's."""
    kind = getattr(op, "op", op)
    name = getattr(kind, "name", None)
    if name == "PREMUL_SUM":
        factor = getattr(op, "factor", None)
        if factor is None:
            raise ArgumentError(
                f"{what}: ReduceOp.PREMUL_SUM needs a factor; build it with "
                f"torch.distributed._make_nccl_premul_sum(factor)"
            )
        return _make_nccl_premul_sum(factor)
    found = _BY_NAME.get(name) if name is not None else None
    if found is None:
        raise ArgumentError(
            f"{what}: unsupported reduce op {op!r}; the accord backend takes "
            f"SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR and PREMUL_SUM"
        )
    return found
