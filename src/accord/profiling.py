"""Events in torch's profiler for accord's calls, when torch is imported and profiling.

Owns: whether torch's profiler is recording, and the events: each collective, object
collective and point-to-point call appears as ``accord:<name>`` (``accord:all_reduce``,
``accord:send``, ``accord:recvAnySource``), as gloo's calls appear as ``gloo:all_reduce``,
with the shapes and dtypes of the call's inputs that gloo records with
``record_shapes=True`` (the tensor of all_reduce, the input list of all_to_all …). NumPy
inputs are described by stand-in tensors of the same shape and dtype (cached, zero bytes:
one element expanded), so nothing is copied.

Cost when not profiling: accord never imports torch for this. The layers that run calls
look up ``sys.modules.get(TORCH_PROFILER)`` (None while torch is not imported) and read
torch's own flag ``torch.autograd.profiler._is_profiler_enabled`` (set by
``torch.profiler.profile`` and ``torch.autograd.profiler.profile`` while they record):
about 30 ns per call without torch, 70 ns with torch imported (README, "Profiling"). Only
then do they call ``begin``/``end`` here. Must not know anything above the foundation layer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

#: The module whose ``_is_profiler_enabled`` flag says that torch's profiler records.
TORCH_PROFILER = "torch.autograd.profiler"

#: accord's operation names whose event is named otherwise (torch's names).
_EVENT_NAMES = {"recv_any": "accord:recvAnySource"}
_STAND_INS: dict[tuple[Any, tuple[int, ...]], Any] = {}  # (dtype name, shape) → stand-in tensor
_STAND_INS_MAX = 512
_FAST: list[Any] = []  # [torch's _RecordFunctionFast or None], looked up on first use
_modules_get = sys.modules.get


def recording() -> bool:
    """Whether torch is imported and its profiler records (never imports torch)."""
    prof = _modules_get(TORCH_PROFILER)
    if prof is None:
        return False
    try:
        return bool(prof._is_profiler_enabled)
    except AttributeError:  # torch is being imported (by another thread): not yet
        return False


def begin_if_recording(op: str, inputs: Iterable[Any] = ()) -> Any:
    """``begin(op, inputs)`` while torch's profiler records, else None. The check costs a
    dict lookup without torch; the hottest path (MeshEngine.run_planned) writes it out."""
    if _modules_get(TORCH_PROFILER) is not None and recording():
        return begin(op, inputs)
    return None


def begin(op: str, inputs: Iterable[Any] = ()) -> Any:
    """Open the event of one call of ``op``; returns the handle for ``end``.

    The event is torch's ``_RecordFunctionFast`` (a C++ record function entered and left
    from Python, about 1 µs), where torch has it: ``_record_function_with_args_enter``, the
    public way with shapes, goes through two dispatched ops and cost about 10 µs per event
    alone and 30 µs per functional all_reduce at world 2 — more than the call it records.
    """
    torch = sys.modules["torch"]
    name = _EVENT_NAMES.get(op) or f"accord:{op}"
    fast = _fast_event(torch)
    if fast is not None:
        event = fast(name, _tensors(torch, inputs))
        event.__enter__()
        return event
    enter = getattr(torch.autograd, "_record_function_with_args_enter", None)
    if enter is None:  # an older torch: the event without shapes
        event = torch.autograd.profiler.record_function(name)
        event.__enter__()
        return event
    return enter(name, *_tensors(torch, inputs))


def end(handle: Any) -> None:
    """Close an event opened by ``begin`` (from any thread, as gloo's works do)."""
    if hasattr(handle, "__exit__"):
        handle.__exit__(None, None, None)
    else:
        sys.modules["torch"].autograd._record_function_with_args_exit(handle)


def _fast_event(torch: Any) -> Any:
    """torch's ``_RecordFunctionFast`` class (None: this torch has none)."""
    try:
        return _FAST[0]
    except IndexError:
        profiler = getattr(getattr(torch, "_C", None), "_profiler", None)
        _FAST.append(getattr(profiler, "_RecordFunctionFast", None))
        return _FAST[0]


def _tensors(torch: Any, inputs: Iterable[Any]) -> list[Any]:
    """The inputs as tensors for the event's shapes: tensors as they are, NumPy arrays as
    stand-ins, lists flattened; anything else is left out."""
    out: list[Any] = []
    for item in inputs:
        if isinstance(item, (list, tuple)):
            out.extend(_tensors(torch, item))
        elif isinstance(item, torch.Tensor):
            out.append(item)
        elif hasattr(item, "dtype") and hasattr(item, "shape"):
            stand_in = _stand_in(torch, str(item.dtype), tuple(item.shape))
            if stand_in is not None:
                out.append(stand_in)
    return out


def _stand_in(torch: Any, dtype_name: str, shape: tuple[int, ...]) -> Any:
    """A tensor of ``shape`` and the torch dtype named like ``dtype_name`` that owns one
    element (expanded with stride 0), cached; None for a dtype torch does not have."""
    key = (dtype_name, shape)
    tensor = _STAND_INS.get(key)
    if tensor is None:
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype):
            return None
        if len(_STAND_INS) >= _STAND_INS_MAX:
            _STAND_INS.clear()
        tensor = _STAND_INS[key] = torch.zeros((), dtype=dtype).expand(shape)
    return tensor
