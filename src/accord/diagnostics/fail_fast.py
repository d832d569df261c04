"""Fail-fast: a rank whose program raises tells its peers at once, naming the exception.

Owns: the ``sys.excepthook`` accord chains in front of the program's (installed by
init_process_group unless ACCORD_FAIL_FAST=0). When an exception escapes the main thread, every
group of the current world is broken with the exception's name, message and place, and the
peers are told (POISON) before the interpreter starts to exit: a peer blocked in a collective
raises ``PeerError: rank 2 reported a failure in this group: rank 2 raised ValueError: bad
batch (uncaught, at train.py:41 in step)`` within moments, whether this process then exits,
hangs in its exit handlers, or stays alive in a non-daemon thread. Must not know about the
launcher (whose bootstrap writes the error file independently).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

_lock = threading.Lock()
_installed = False
_getters: list[Callable[..., Any]] = []


def describe(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> str:
    """'ValueError: bad batch (uncaught, at train.py:41 in step)'."""
    text = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
    frames = traceback.extract_tb(tb) if tb is not None else []
    if frames:
        last = frames[-1]
        text += f" (uncaught, at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return text[:2000]


def install(current_world: Callable[..., Any]) -> None:
    """Chain the hook in front of ``sys.excepthook`` (once per process); each distinct
    ``current_world`` getter given is asked for a world whose groups to abort."""
    global _installed
    with _lock:
        if current_world not in _getters:
            _getters.append(current_world)
        if _installed:
            return
        previous = sys.excepthook

        def accord_excepthook(
            exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
        ) -> None:
            for getter in list(_getters):
                try:
                    world = getter(required=False)
                    if world is not None:
                        reason = f"rank {world.rank} raised {describe(exc_type, exc, tb)}"
                        for group in world.all_groups():
                            group.abort(reason)
                except Exception:  # noqa: BLE001 — the program's own traceback must still print
                    pass
            previous(exc_type, exc, tb)

        sys.excepthook = accord_excepthook
        _installed = True
