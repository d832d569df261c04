"""accord as a torch.distributed backend: ``init_process_group("accord")``.

Owns: ``register()``, which tells torch about the backend (name "accord", CPU), and what it
needs: the creator (``context``), the ProcessGroup subclass, torch's c10d backend
(``backend``), the Work bridge (``work``), the tensor checks (``tensors``), sparse all_reduce
(``sparse``) and the torch Store adapter (``store``); and accord's own world as torch's
default group (``default_group``, after ``accord.init_process_group`` in a program that has
torch). ``import accord`` registers it when torch is already imported; the ``torch.backends``
entry point (``_accord_torch_entry``) registers it when torch is imported later, without
importing accord until the first group is made. Importing this package imports torch. Must not
know about the launcher.
"""

from __future__ import annotations

from .backend import BACKEND_NAME, AccordProcessGroup
from .membership import grow_group, join_process_group, lost_ranks, shrink_group


def register() -> bool:
    """Register backend "accord" with torch.distributed (idempotent). False if torch's
    distributed package is not available."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return True
    from .context import create

    dist.Backend.register_backend(BACKEND_NAME, create, extended_api=True, devices=["cpu"])
    return True


__all__ = [
    "AccordProcessGroup",
    "BACKEND_NAME",
    "grow_group",
    "join_process_group",
    "lost_ranks",
    "register",
    "shrink_group",
]
