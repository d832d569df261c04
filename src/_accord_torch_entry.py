"""The ``torch.backends`` entry point of the accord package (runs on every ``import torch``).

It registers backend "accord" with torch.distributed so that ``init_process_group("accord")``
works in a program that never imports accord; accord itself is imported only when the first
such group is made. It must be cheap (well under 10 ms) and must never raise: it does nothing
when torch.distributed or accord is missing or broken.

In a program that imported accord and called its ``init_process_group`` *before* importing
torch, it also makes that world torch's default group (``accord.api.sharing.torch_imported``),
so torch's DDP finds it; a program that never imported accord pays one dict lookup for this.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any


def _create(*args: Any, **kwargs: Any) -> Any:
    from accord.integrations.torch.context import create

    return create(*args, **kwargs)


def register() -> None:
    """Called by torch at import; never raises."""
    try:
        dist = getattr(sys.modules.get("torch"), "distributed", None)
        if dist is None or not dist.is_available():
            return
        if "ACCORD" not in dist.Backend._plugins and importlib.util.find_spec("accord") is not None:
            dist.Backend.register_backend("accord", _create, extended_api=True, devices=["cpu"])
    except Exception:  # noqa: BLE001 — a broken plugin must never break `import torch`
        return
    _share_accords_world()


def _share_accords_world() -> None:
    """accord's world made before torch was imported becomes torch's default group."""
    sharing = sys.modules.get("accord.api.sharing")
    if sharing is None:
        return
    try:
        sharing.torch_imported()
    except Exception:  # noqa: BLE001 — never break `import torch` (torch_imported warns)
        return
