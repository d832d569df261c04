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
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "bytes",
]
DTYPE_CODES: dict[str, int] = {name: i + 1 for i, name in enumerate(_DTYPE_NAMES)}
DTYPE_NAMES: dict[int, str] = {code: name for name, code in DTYPE_CODES.items()}


class Buffer:
    """A flat, contiguous NumPy view of one user buffer, with what the collectives must know."""

    __slots__ = ("original", "flat", "dtype_name", "shape", "_target", "_is_torch")

    def __init__(self, original: Any, flat: np.ndarray, dtype_name: str, shape: tuple[int, ...],
                 target: Any = None, is_torch: bool = False) -> None:
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
    name = _NAMES.get(dtype)
    if name is not None:
        return name
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big"):
        raise ArgumentTypeError(f"{what} has a big-endian dtype ({dtype}); convert it with astype first")
    name = dtype.name
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
            f"{what} is on device {tensor.device}, but accord's backend works on CPU tensors; "
            f"move it with .cpu() (a GPU backend is not available yet)"
        )
    if tensor.layout != torch.strided:
        raise ArgumentTypeError(f"{what} has layout {tensor.layout}; only dense (strided) tensors "
                                f"are supported")
    t = tensor.detach()
    shape = tuple(t.shape)
    contiguous = t.is_contiguous()
    work = t if contiguous else t.contiguous()
    if t.dtype == torch.bfloat16:
        flat = work.view(torch.int16).numpy().view(np.uint16).reshape(-1)
        name = "bfloat16"
    else:
        try:
            flat = work.numpy().reshape(-1)
        except (TypeError, RuntimeError) as exc:
            raise ArgumentTypeError(f"{what} has dtype {t.dtype}, which accord cannot send") from exc
        name = _numpy_dtype_name(flat.dtype, what)
    if contiguous:
        return Buffer(tensor, flat, name, shape, is_torch=True)
    return Buffer(tensor, flat, name, shape, target=t if writable else None, is_torch=True)


def same_layout(a: Buffer, b: Buffer) -> bool:
    """Same element type and count (shape may differ, as torch allows for flat collectives)."""
    return a.dtype_name == b.dtype_name and a.count == b.count
