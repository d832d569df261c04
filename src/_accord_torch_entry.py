"""The ``torch.backends`` entry point of the accord package (runs on every ``import torch``).

It registers backend "accord" with torch.distributed so that ``init_process_group("accord")``
works in a program that never imports accord; accord itself is imported only when the first
such group is made. It must be cheap (well under 10 ms) and must never raise: it does nothing
when torch.distributed or accord is missing or broken.
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
        if dist is None or not dist.is_available() or "ACCORD" in dist.Backend._plugins:
            return
        if importlib.util.find_spec("accord") is None:
            return
        dist.Backend.register_backend("accord", _create, extended_api=True, devices=["cpu"])
    except Exception:  # noqa: BLE001 — a broken plugin must never break `import torch`
        return
