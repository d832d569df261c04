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
then do they call ``begin``/``end`` here.

Threads: torch records an event in the thread that opens and closes it, and only in the
threads it knows — the one that started the profiler and those torch hands its state to
(its own workers: gloo's event runs on gloo's thread) — unless the profiler records every
thread (``_ExperimentalConfig(profile_all_threads=True)``). An event closed by another
thread than its opener's would end only when the profiler stops; ``end`` from another
thread hands it back instead: its opener closes it at its next ``begin``, ``end`` or
``flush`` (an isend that accord's watcher saw complete ends when its caller next looks),
or the profiler's stop does, whichever comes first. The stop closes every event still open
(``_stopped``): none is ever closed in a later profile, where torch would write its end
into the stopped one's freed records.
An event that must end exactly on another thread (a queued call that accord's worker runs:
``group.call_events``) is opened with ``begin_handed``: torch's jit Future carries the
opener's profiler state to the thread that ends it, at about 45 µs an event, so it is
kept for the calls handed to another thread. Must not know anything above the foundation
layer.
"""

from __future__ import annotations

import sys
import threading
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
_get_ident = threading.get_ident
#: opener thread → its events that another thread ended (``end``), closed at its next look
#: (read it to skip ``flush`` when empty; only this module writes it)
HANDED_BACK: dict[int, list[Opened]] = {}
_OPEN: set[Opened] = set()  # events begun and not closed yet: the profiler's stop closes them
#: guards HANDED_BACK, _OPEN and each handle's close (held while an event closes: a stop
#: waits for it, so no close lands in the next profile)
_LOCK = threading.RLock()
_STOP_HOOKED: list[Any] = []  # [torch's own _run_on_profiler_stop], once wrapped (_hook_stops)


class Opened:
    """An event ``begin`` opened, and the thread that opened it (the one to close it)."""

    __slots__ = ("event", "thread")

    def __init__(self, event: Any, thread: int) -> None:
        self.event = event
        self.thread = thread


class Handed:
    """An event ``begin_handed`` opened: any thread may end it (``end``), exactly then."""

    __slots__ = ("future",)

    def __init__(self, future: Any) -> None:
        self.future = future


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


def begin(op: str, inputs: Iterable[Any] = ()) -> Opened:
    """Open the event of one call of ``op`` in this thread; returns the handle for ``end``.

    The event is torch's ``_RecordFunctionFast`` (a C++ record function entered and left
    from Python, about 1 µs), where torch has it: ``_record_function_with_args_enter``, the
    public way with shapes, goes through two dispatched ops and cost about 10 µs per event
    alone and 30 µs per functional all_reduce at world 2 — more than the call it records.
    """
    if HANDED_BACK:
        flush()
    torch = sys.modules["torch"]
    name = _EVENT_NAMES.get(op) or f"accord:{op}"
    fast = _fast_event(torch)
    if fast is not None:
        event = fast(name, _tensors(torch, inputs))
        event.__enter__()
    elif (enter := getattr(torch.autograd, "_record_function_with_args_enter", None)) is not None:
        event = enter(name, *_tensors(torch, inputs))
    else:  # an older torch: the event without shapes
        event = torch.autograd.profiler.record_function(name)
        event.__enter__()
    return _track(Opened(event, _get_ident()))


def begin_handed(op: str) -> Handed:
    """Open the event of one call of ``op`` here, for another thread to end (``end``): torch's
    jit Future carries this thread's profiler state to the thread that completes it, where
    torch ends the event. About 45 µs (two dispatched ops and a Future), against 1 for
    ``begin``; the event has no shapes."""
    torch = sys.modules["torch"]
    ops = torch.ops.profiler
    handle = ops._record_function_enter_new(_EVENT_NAMES.get(op) or f"accord:{op}", None)
    future = torch.futures.Future()
    ops._call_end_callbacks_on_jit_fut(handle, future)
    return Handed(future)


def end(handle: Opened | Handed) -> None:
    """Close an event ``begin`` or ``begin_handed`` opened. From another thread than
    ``begin``'s, the event is handed back to its opener, which closes it at its next
    ``begin``, ``end`` or ``flush`` (the module docstring: torch would end it only when the
    profiler stops). An event the profiler's stop closed already is left alone."""
    if isinstance(handle, Handed):
        handle.future.set_result(None)
        return
    with _LOCK:
        event = handle.event
        if event is None:
            return  # closed at the profiler's stop
        if handle.thread != _get_ident() and recording():  # (read under the lock: see _stopped)
            HANDED_BACK.setdefault(handle.thread, []).append(handle)
            return
        _close(handle, event)
    if HANDED_BACK:
        flush()


def flush() -> None:
    """Close the events this thread opened that other threads ended since (``end``)."""
    if not HANDED_BACK:
        return
    with _LOCK:
        for handle in HANDED_BACK.pop(_get_ident(), ()):
            if handle.event is not None:
                _close(handle, handle.event)


def _close(handle: Opened, event: Any) -> None:
    """(Under ``_LOCK``.) Close ``handle``'s event now, in this thread, once."""
    handle.event = None
    _OPEN.discard(handle)
    _close_event(event)


def _track(handle: Opened) -> Opened:
    """Note an opened event until it closes, so that the profiler's stop can close it if
    nobody has (``_stopped``); where torch has no hook for its stop, nothing is noted."""
    if _STOP_HOOKED or _hook_stops():
        with _LOCK:
            _OPEN.add(handle)
    return handle


def _hook_stops() -> bool:
    """Wrap ``torch.autograd.profiler._run_on_profiler_stop`` with ``_stopped`` (once; False:
    this torch has none). torch calls it from every profiler's exit, after the profiler was
    disabled, looking it up by name each time."""
    module = sys.modules.get(TORCH_PROFILER)
    stop = getattr(module, "_run_on_profiler_stop", None)
    if stop is None:
        return False
    with _LOCK:
        if not _STOP_HOOKED:

            def stopped() -> None:
                stop()
                _stopped()

            setattr(module, "_run_on_profiler_stop", stopped)  # noqa: B010 (a module of torch)
            _STOP_HOOKED.append(stop)
    return True


def _stopped() -> None:
    """The profiler stopped: close every event still open, here. Closed later, by a thread
    recording in the next profile (an opener's flush, an isend waited for after the
    profiler's step, a queued call's run), torch would write their end into the stopped
    profile's freed records. Here, after the profiler was disabled, this thread has no
    profiler state: torch ends them at the stop, as any event still open then. (torch has
    cleared its recording flag before: an ``end`` that takes the lock after this hands
    nothing back.)"""
    with _LOCK:
        HANDED_BACK.clear()
        for handle in list(_OPEN):
            if handle.event is not None:
                _close(handle, handle.event)
        _OPEN.clear()


def records_known_threads_only() -> bool:
    """Whether torch's profiler records only the threads it knows (its default: the one
    that started it, and those it hands its state to), not every thread; call it in the
    thread that started it, while ``recording()``. torch sets its thread-local profiler
    state in those threads, and none anywhere when it records every thread."""
    return bool(sys.modules["torch"].autograd._profiler_enabled())


def _close_event(event: Any) -> None:
    if hasattr(event, "__exit__"):
        event.__exit__(None, None, None)
    else:
        sys.modules["torch"].autograd._record_function_with_args_exit(event)


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
