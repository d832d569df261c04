"""The array adapter: NumPy arrays, CPU torch tensors and buffer-protocol objects → flat views.

Owns: ``Buffer`` (a 1-D contiguous NumPy view of the user's memory, its logical element type
and shape), ``as_buffer`` (which checks what the caller passed), and the dtype codes that
travel in message headers. Must not know about groups, transports or torch beyond duck typing
(torch is never imported here; a tensor is recognised by its type's module).

In place, always: a contiguous input is viewed, never copied. A non-contiguous one (a strided
NumPy view, a transposed tensor) is copied into a contiguous scratch array and written back
into the user's view by ``Buffer.finish()``, so results land where the user looks, as with gloo.
bfloat16 has no NumPy type: it travels as its 16-bit pattern (``uint16``) with
``dtype_name == "bfloat16"``, and the reduce kernels know how to combine it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError

# Codes carried in message headers so that peers can check that they agree on the element type.
_DTYPE_NAMES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bytes",
]
DTYPE_CODES: dict[str, int] = {name: i + 1 for i, name in enumerate(_DTYPE_NAMES)}
DTYPE_NAMES: dict[int, str] = {code: name for name, code in DTYPE_CODES.items()}


class Buffer:
    """A flat, contiguous NumPy view of one user buffer, with what the collectives must know."""

    __slots__ = ("original", "flat", "dtype_name", "shape", "_target", "_is_torch")

    def __init__(
        self,
        original: Any,
        flat: np.ndarray,
        dtype_name: str,
        shape: tuple[int, ...],
        target: Any = None,
        is_torch: bool = False,
    ) -> None:
        self.original = original
        self.flat = flat
        self.dtype_name = dtype_name
        self.shape = shape
        self._target = target  # the user's non-contiguous view to write back into, if any
        self._is_torch = is_torch

    @property
    def count(self) -> int:
        return int(self.flat.size)

    @property
    def nbytes(self) -> int:
        return int(self.flat.nbytes)

    @property
    def itemsize(self) -> int:
        return int(self.flat.itemsize)

    @property
    def dtype_code(self) -> int:
        return DTYPE_CODES.get(self.dtype_name, 0)

    @property
    def is_copy(self) -> bool:
        """True when ``flat`` is scratch memory that ``finish()`` copies back."""
        return self._target is not None

    def describe(self) -> str:
        """'float32[4, 8]', for messages."""
        return f"{self.dtype_name}[{', '.join(map(str, self.shape))}]"

    def finish(self) -> None:
        """Copy the result back into the user's non-contiguous view (no-op when viewed)."""
        if self._target is None:
            return
        if self._is_torch:
            torch = sys.modules["torch"]
            source = torch.from_numpy(self.flat.reshape(self.shape))
            if self.dtype_name == "bfloat16":
                source = source.view(torch.bfloat16)
            self._target.copy_(source)
        else:
            self._target[...] = self.flat.reshape(self.shape)


def is_tensor(obj: Any) -> bool:
    """True for a torch.Tensor, without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def as_buffer(obj: Any, *, writable: bool, what: str = "tensor") -> Buffer:
    """View ``obj`` as a flat contiguous NumPy array, checking what the caller passed.

    Args:
        obj: a NumPy array, a CPU torch tensor, or an object with the buffer protocol.
        writable: whether the collective writes into it (results, receive buffers).
        what: the parameter's name, for error messages.

    Raises:
        TypeError: not an array, a tensor or a buffer; or an unsupported element type.
        ValueError: read-only where a result must be written; a tensor on a non-CPU device.
    """
    if type(obj) is np.ndarray or isinstance(obj, np.ndarray):
        return _from_numpy(obj, writable, what)
    if is_tensor(obj):
        return _from_torch(obj, writable, what)
    if isinstance(obj, (list, tuple, int, float, complex, str)) or obj is None:
        raise ArgumentTypeError(
            f"{what} must be a NumPy array or a torch tensor, got {type(obj).__name__}; "
            f"wrap Python values first, e.g. numpy.asarray(...)"
        )
    try:
        view = memoryview(obj)
    except TypeError:
        raise ArgumentTypeError(
            f"{what} must be a NumPy array, a torch tensor or a buffer, got {type(obj).__name__}"
        ) from None
    return _from_numpy(np.asarray(view), writable, what)


def _from_numpy(array: np.ndarray, writable: bool, what: str) -> Buffer:
    name = _numpy_dtype_name(array.dtype, what)
    if writable and not array.flags.writeable:
        raise ArgumentError(
            f"{what} is read-only (flags.writeable is False) but this call writes its result "
            f"into it; pass a writable array, e.g. array.copy()"
        )
    if array.flags.c_contiguous:
        return Buffer(array, array if array.ndim == 1 else array.reshape(-1), name, array.shape)
    scratch = np.ascontiguousarray(array)
    return Buffer(array, scratch.reshape(-1), name, array.shape, target=array if writable else None)


_NAMES: dict[np.dtype, str] = {}  # dtype.name is computed in Python by NumPy: cache it


def _numpy_dtype_name(dtype: np.dtype, what: str) -> str:
    cached = _NAMES.get(dtype)
    if cached is not None:
        return cached
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big"):
        raise ArgumentTypeError(f"{what} has a big-endian dtype ({dtype}); convert it with astype first")
    name: str = dtype.name
    if name in DTYPE_CODES:
        _NAMES[dtype] = name
        return name
    raise ArgumentTypeError(
        f"{what} has dtype {dtype}, which accord cannot send: use a bool, integer, float or "
        f"complex dtype (for objects, use the *_object collectives)"
    )


def _from_torch(tensor: Any, writable: bool, what: str) -> Buffer:
    torch = sys.modules["torch"]
    if tensor.device.type != "cpu":
        raise ArgumentError(
            f"{what} is on device {tensor.device}, but accord's backend works on CPU tensors: "
            f"move it with .cpu(), or send CUDA tensors to NCCL with "
            f"init_process_group(backend='cpu:accord,cuda:nccl')"
        )
    if tensor.layout != torch.strided:
        raise ArgumentTypeError(
            f"{what} has layout {tensor.layout}; only dense (strided) tensors are supported"
        )
    key = str(tensor.dtype)
    typestr = _TORCH_TYPESTR.get(key)
    if typestr is None:
        raise ArgumentTypeError(f"{what} has dtype {tensor.dtype}, which accord cannot send")
    name = key[6:]  # "torch.bfloat16" -> "bfloat16"
    shape = tuple(tensor.shape)
    if tensor.is_contiguous() and not (tensor.is_conj() or tensor.is_neg()):
        return Buffer(tensor, tensor_memory(tensor, typestr), name, shape, is_torch=True)
    # A strided (or conjugate/negative) view: a contiguous copy that finish() writes back.
    flat = np.empty(tensor.numel(), dtype=np.dtype(typestr))
    copy = torch.from_numpy(flat)
    if name == "bfloat16":
        copy = copy.view(torch.bfloat16)
    copy.view(shape).copy_(tensor.detach())
    return Buffer(tensor, flat, name, shape, target=tensor.detach() if writable else None, is_torch=True)


#: torch dtype (as str) → the NumPy type string of its memory (bfloat16 as its 16-bit pattern).
_TORCH_TYPESTR = {
    "torch.bool": "|b1",
    "torch.uint8": "|u1",
    "torch.int8": "|i1",
    "torch.int16": "<i2",
    "torch.uint16": "<u2",
    "torch.int32": "<i4",
    "torch.uint32": "<u4",
    "torch.int64": "<i8",
    "torch.uint64": "<u8",
    "torch.float16": "<f2",
    "torch.bfloat16": "<u2",
    "torch.float32": "<f4",
    "torch.float64": "<f8",
    "torch.complex64": "<c8",
    "torch.complex128": "<c16",
}


class _TensorMemory:
    """Hands a tensor's memory to NumPy (``__array_interface__``) and keeps the tensor alive
    for as long as the array lives (the array's ``base``)."""

    __slots__ = ("__array_interface__", "tensor")
    __array_interface__: dict[str, Any]
    tensor: Any


#: torch dtypes whose memory NumPy reads as the same element type (all but bfloat16), by the
#: dtype object itself, filled on first use (torch is never imported here).
_PLAIN_TYPESTR: dict[Any, str] = {}


def plain_view(obj: Any) -> Any:
    """``obj`` as the short paths take it: a NumPy array as it is; a plain CPU torch tensor
    (``torch.Tensor`` itself, dense, C-contiguous, not empty, not conjugate or negative, of an
    element type NumPy has: not bfloat16) as a NumPy array of its shape over its memory
    (nothing copied, the storage stays resizable, as with ``tensor_memory``); anything else as
    it is, for the long path to take and to explain. Only for blocking calls (see ``_VIEWS``)."""
    if type(obj) is np.ndarray:
        return obj
    torch = sys.modules.get("torch")
    if torch is None or type(obj) is not torch.Tensor:
        return obj
    if not _PLAIN_TYPESTR:
        _PLAIN_TYPESTR.update(
            {
                getattr(torch, name[6:]): typestr
                for name, typestr in _TORCH_TYPESTR.items()
                if name != "torch.bfloat16" and hasattr(torch, name[6:])
            }
        )
    typestr = _PLAIN_TYPESTR.get(obj.dtype)
    if (
        typestr is None
        or not obj.is_cpu
        or obj.layout is not torch.strided
        or not obj.is_contiguous()
        or obj.is_conj()
        or obj.is_neg()
    ):
        return obj
    address, shape = obj.data_ptr(), obj.shape
    key = (address, typestr, shape)
    view = _VIEWS.get(key)
    if view is None:
        if not address or obj.numel() == 0:
            return obj
        holder = _TensorMemory()  # (no reference to the tensor: see _VIEWS)
        holder.__array_interface__ = {
            "data": (address, False),
            "shape": tuple(shape),
            "typestr": typestr,
            "version": 3,
        }
        view = np.asarray(holder)
        if len(_VIEWS) >= _MAX_VIEWS:
            _VIEWS.clear()
        _VIEWS[key] = view
    return view


#: Views made by ``plain_view``, by (address, element type, shape): making one costs more than
#: a small call's own work. A view names only memory, never the tensor it was made for: it is
#: handed out only for a live tensor with that very address, type and shape, whose memory it
#: then is, and only to blocking calls, which are done with it before their caller can drop
#: the tensor.
_VIEWS: dict[tuple[int, str, Any], np.ndarray] = {}
_MAX_VIEWS = 256


def tensor_memory(tensor: Any, typestr: str | None = None) -> np.ndarray:
    """A flat NumPy array over a contiguous CPU tensor's memory.

    Unlike ``tensor.numpy()``, this leaves the tensor's storage resizable: FSDP frees its
    flat parameters by resizing their storage to zero, which ``numpy()`` forbids forever.
    """
    typestr = typestr or _TORCH_TYPESTR[str(tensor.dtype)]
    count = tensor.numel()
    if count == 0:
        return np.empty(0, dtype=np.dtype(typestr))
    holder = _TensorMemory()
    holder.tensor = tensor
    holder.__array_interface__ = {
        "data": (tensor.data_ptr(), False),
        "shape": (count,),
        "typestr": typestr,
        "version": 3,
    }
    return np.asarray(holder)


def same_layout(a: Buffer, b: Buffer) -> bool:
    """Same element type and count (shape may differ, as torch allows for flat collectives)."""
    return a.dtype_name == b.dtype_name and a.count == b.count
