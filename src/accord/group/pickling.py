"""Pickling for the object collectives: out-of-band buffers and an unpickling policy.

Owns: ``dumps`` (pickle protocol 5; the NumPy arrays and CPU torch tensors inside an object
become separate frames that point at their memory: no copy), ``loads`` (rebuild an object from
the frames received, zero-copy again, enforcing an ``ObjectPolicy`` if there is one), and
``ObjectPolicy`` itself. Must not know about groups, transports or the default world.

Frames of one object: frame 0 is an 8-byte little-endian count of buffers followed by the
pickle stream; then one frame per out-of-band buffer, in order. Lengths travel in the
transport's 64-bit frame headers, so there is no 2 GiB limit and no size-exchange round.

Security: unpickling runs code chosen by whoever made the data. With no policy (the default,
as torch) only exchange objects with ranks you trust. An ``ObjectPolicy`` makes unpickling
refuse every global outside a short list of data types (containers, numbers, strings, NumPy
arrays, CPU tensors) plus what the policy allows.
"""

from __future__ import annotations

import io
import pickle
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentTypeError

_COUNT = struct.Struct("<Q")

#: Globals every policy allows: they rebuild plain data and cannot run code of the sender's
#: choosing. (Containers, numbers and strings need no global at all in protocol 5.)
DATA_GLOBALS = frozenset(
    {
        "builtins.complex",
        "builtins.set",
        "builtins.frozenset",
        "builtins.bytearray",
        "builtins.slice",
        "builtins.range",
        "collections.OrderedDict",
        "numpy.ndarray",
        "numpy.dtype",
        "numpy._core.numeric._frombuffer",
        "numpy._core.multiarray._reconstruct",
        "numpy._core.multiarray.scalar",
        "numpy.core.numeric._frombuffer",
        "numpy.core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar",
        "accord.group.pickling._rebuild_tensor",
    }
)


@dataclass(frozen=True)
class ObjectPolicy:
    """What unpickling in the object collectives may import (accord's addition; torch has none).

    ``allowed`` holds exact names (``"collections.Counter"``, ``"mypkg.models.Config"``) or
    package prefixes (``"mypkg"``: any class or function *defined* in mypkg or below, reached
    without dots — a function another module merely imported is refused). Everything in
    ``DATA_GLOBALS`` is always allowed. Never list ``"builtins"`` or other modules with
    callables that act on the system: pickle calls what it loads with the sender's arguments.
    """

    allowed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        entries = (self.allowed,) if isinstance(self.allowed, str) else self.allowed
        if any(not isinstance(e, str) or not e for e in entries):
            raise ArgumentTypeError(f"ObjectPolicy.allowed must be names (str), got {self.allowed!r}")
        object.__setattr__(self, "allowed", tuple(entries))

    def exact(self, module: str, name: str) -> bool:
        full = f"{module}.{name}"
        return full in DATA_GLOBALS or full in self.allowed

    def under_prefix(self, module: str) -> bool:
        return any(module == e or module.startswith(e + ".") for e in self.allowed)


def dumps(obj: Any) -> list[memoryview]:
    """The frames of ``obj`` (see the module docstring)."""
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    stream.write(bytes(_COUNT.size))
    pickler = _TensorPickler if "torch" in sys.modules else pickle.Pickler
    pickler(stream, protocol=5, buffer_callback=buffers.append).dump(obj)
    head = stream.getbuffer()
    _COUNT.pack_into(head, 0, len(buffers))
    return [head, *(b.raw() for b in buffers)]


def buffer_count(head: memoryview) -> int:
    """How many buffer frames follow frame 0."""
    if head.nbytes < _COUNT.size:
        raise pickle.UnpicklingError(
            f"an object message of {head.nbytes} bytes is too short: "
            f"the peer did not send an object (mismatched calls?)"
        )
    return int(_COUNT.unpack_from(head, 0)[0])


def loads(frames: list[Any], policy: ObjectPolicy | None) -> Any:
    """Rebuild the object from its frames; with a policy, refuse globals it does not allow."""
    data = memoryview(frames[0])[_COUNT.size :]
    if policy is None:
        return pickle.loads(data, buffers=frames[1:])
    return _PolicyUnpickler(io.BytesIO(data), policy, frames[1:]).load()


def copy_frames(frames: list[memoryview]) -> list[Any]:
    """Frames that own their memory (a rank's own object, rebuilt as a copy as torch does)."""
    return [frames[0], *(bytearray(f) for f in frames[1:])]


class _PolicyUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, policy: ObjectPolicy, buffers: Iterable[Any]) -> None:
        super().__init__(file, buffers=buffers)
        self._policy = policy

    def find_class(self, module: str, name: str) -> Any:
        if self._policy.exact(module, name):
            return super().find_class(module, name)
        if self._policy.under_prefix(module) and "." not in name:
            found = super().find_class(module, name)
            if self._policy.under_prefix(getattr(found, "__module__", None) or ""):
                return found
        raise pickle.UnpicklingError(
            f"refusing to unpickle {module}.{name}: the object policy of this group allows only "
            f"plain data and {list(self._policy.allowed) or 'nothing else'}. If the sender is "
            f"trusted, allow it: accord.set_object_policy([..., {f'{module}.{name}'!r}])"
        )


# -- torch tensors: their memory travels as an out-of-band buffer ------------------------------


class _TensorPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules["torch"]
        if type(obj) is not torch.Tensor or not _plain_tensor(obj, torch):
            return NotImplemented
        t = obj.detach().resolve_conj().resolve_neg().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy()
        dtype = str(t.dtype).removeprefix("torch.")
        return _rebuild_tensor, (pickle.PickleBuffer(raw), dtype, tuple(t.shape), obj.requires_grad)


def _plain_tensor(t: Any, torch: Any) -> bool:
    return (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.is_quantized
        and (t.is_leaf or not t.requires_grad)
    )


def _rebuild_tensor(buffer: Any, dtype: str, shape: tuple[int, ...], requires_grad: bool) -> Any:
    """A CPU tensor over the received bytes (no copy)."""
    import torch

    kind = getattr(torch, dtype)
    view = memoryview(buffer)
    flat = torch.frombuffer(view, dtype=kind) if view.nbytes else torch.empty(0, dtype=kind)
    tensor = flat.reshape(shape)
    return tensor.requires_grad_(True) if requires_grad else tensor
