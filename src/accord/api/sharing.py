"""When accord's world is torch's default group too (one world for both APIs), and the seam to it.

Owns: the decision, made at the edges of the world's life: ``share`` (the last step of
``init_process_group``), ``torch_imported`` (torch imported *after* init: the
``torch.backends`` entry point calls it during ``import torch``) and ``unshare`` (the first
step of ``destroy_process_group``). It shares only when torch is already in
``sys.modules`` — a NumPy-only program never pays for importing torch — and
``ACCORD_TORCH_DEFAULT_GROUP`` is not 0. The work itself is
``integrations.torch.default_group``, a layer above this one: it is reached only through
``TORCH_DEFAULT_GROUP`` (a module name, imported when used), never by an import statement.
Must not know torch's API or how the world was made.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

from .. import config
from ..world import World, current_world

#: The module that makes accord's world torch's default group (``publish``, ``release``,
#: ``published``); imported only in a process that has torch.
TORCH_DEFAULT_GROUP = "accord.integrations.torch.default_group"


def share(world: World) -> None:
    """After init: make ``world`` torch's default group too, if the program has torch."""
    if "torch" not in sys.modules or not config.torch_default_group():
        return
    try:
        _integration().publish(world)
    except Exception as exc:  # noqa: BLE001 — accord's world is made: torch's side only warns
        _warn(exc, "at init_process_group")


def torch_imported() -> None:
    """torch was just imported (the entry point runs at the end of ``import torch``): share
    the world init made before, if any. Never raises (it runs inside ``import torch``)."""
    world = current_world(required=False)
    if world is None or not config.torch_default_group():
        return
    try:
        module = _integration()
        if module.published() is None:
            module.publish(world)
    except Exception as exc:  # noqa: BLE001 — importing torch must never fail because of us
        _warn(exc, "when torch was imported (import torch before accord.init_process_group)")


def unshare(world: World) -> None:
    """Before destroying ``world``: end torch's default group too, if it is this world."""
    module = sys.modules.get(TORCH_DEFAULT_GROUP)
    if module is not None:
        module.release(world)


def _warn(exc: Exception, when: str) -> None:
    warnings.warn(
        f"accord could not make its world torch's default group {when}: "
        f"{type(exc).__name__}: {exc}. torch's own code (DDP, FSDP, DeviceMesh) will not find "
        f"it: call torch.distributed.init_process_group('accord') instead of accord's "
        f"init_process_group (or set ACCORD_TORCH_DEFAULT_GROUP=0 to silence this)",
        RuntimeWarning,
        stacklevel=3,
    )


def _integration() -> Any:
    return importlib.import_module(TORCH_DEFAULT_GROUP)
