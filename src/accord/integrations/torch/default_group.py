"""accord's world as torch.distributed's default group too: one world for both APIs.

Owns: ``publish`` — after ``accord.init_process_group`` in a program that has torch,
``torch.distributed.init_process_group("accord", store=…, rank=…, world_size=…)`` is called
with the creator told to *adopt* the running world (``context.adopting``): torch's default
group is an ``AccordProcessGroup`` over the world's own default group (same mesh, same
connections, same rank and size; no second rendezvous), and torch's later ``new_group``
calls make accord subgroups on that world (``context.create``). The store torch gets is the
world's own store under ``<world prefix>/torch/`` (torch meets there only for its optional
init barrier). ``release`` — accord's ``destroy_process_group`` ends torch's default group
first (torch's subgroups with it); and the reverse: torch's ``destroy_process_group`` ends
accord's world (``_torch_ended``), so neither API is left holding a world the other took
down. A world on another engine (backend ``mpi``) is published the same way: its groups
run on MPI, and the store is its diagnostics store. Where the world cannot be torch's
(torch's default group exists already, an MPI world without a store, a torch without a
usable ``torch.distributed``) a ``RuntimeWarning`` says what to write instead; accord's own
world is unaffected.

CUDA: accord's torch backend takes CPU tensors, and torch cannot put its NCCL beside a Python
process group in one default group (its ``_new_process_group_helper`` keeps the Python group
alone). A world made with ``"cpu:accord,cuda:nccl"`` (or ``"nccl"``) is published for its
CPU tensors, with a warning that torch's code on CUDA tensors needs torch's own
``init_process_group("nccl")``; accord's own functions route CUDA tensors to NCCL as before.

When is decided in ``api.sharing``. Must not know about the launcher or how the world was
made.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as tdist

from ...api import lifecycle
from ...devices.nccl.c10d_store import C10dStore
from ...group.process_group import ProcessGroup
from ...store.hash_store import HashStore
from ...store.prefix_store import PrefixStore
from ...world import World, current_world
from . import context
from .backend import BACKEND_NAME, AccordProcessGroup

#: What to write instead, where accord's world cannot be torch's default group.
INSTEAD = (
    "torch's own code (DistributedDataParallel, FSDP, DeviceMesh, torch.distributed.*) will not "
    "find accord's world. To give torch a default group on accord, call "
    "torch.distributed.init_process_group('accord') instead of accord's init_process_group "
    "(accord's functions then work on torch tensors too); ACCORD_TORCH_DEFAULT_GROUP=0 "
    "silences this warning"
)


@dataclass
class Shared:
    """The world torch's default group is, and the torch Store torch holds (its Python half
    must outlive torch's use of it)."""

    world: World
    store: Any
    ending: bool = False  # one side is taking the world down: the other must not again


_lock = threading.Lock()
_shared: Shared | None = None


def published() -> World | None:
    """The world that is torch's default group now (None: none of accord's)."""
    shared = _shared
    return None if shared is None or shared.ending else shared.world


def publish(world: World) -> None:
    """Make ``world`` torch's default group (or warn why not and leave torch alone)."""
    global _shared
    why = _cannot(world)
    if why:
        warnings.warn(f"accord: {why}; {INSTEAD}", RuntimeWarning, stacklevel=4)
        return
    if world.device_backends:
        warnings.warn(
            f"accord: torch's default group is accord's world for CPU tensors only (accord's "
            f"torch backend takes no {', '.join(world.device_backends)} tensors; accord's own "
            f"functions still send them to NCCL). For torch's code (DDP, FSDP) on CUDA "
            f"tensors call torch.distributed.init_process_group('nccl') instead of accord's "
            f"init_process_group",
            RuntimeWarning,
            stacklevel=4,
        )
    from . import register

    register()
    # (a world of one rank without a store, as MPI's: torch meets nobody, a local store does)
    own = world.store if world.store is not None else HashStore()
    store = C10dStore(PrefixStore(f"{world.store_prefix}/torch/", own))
    shared = Shared(world, store)
    seconds = world.default_group.timeout.total_seconds()
    with context.adopting(world, lambda: _torch_ended(shared)):
        tdist.init_process_group(
            BACKEND_NAME,
            store=store,
            rank=world.rank,
            world_size=world.size,
            timeout=timedelta(seconds=seconds),
        )
    with _lock:
        _shared = shared


def release(world: World) -> None:
    """accord destroys ``world``: if it is torch's default group, torch's world ends first."""
    global _shared
    with _lock:
        shared = _shared
        if shared is None or shared.world is not world or shared.ending:
            return
        shared.ending, _shared = True, None
    if tdist.is_initialized() and _is_ours(tdist.group.WORLD, world):
        tdist.destroy_process_group()


def _torch_ended(shared: Shared) -> None:
    """torch's default group was shut down (torch's destroy_process_group): accord's world,
    the same world, ends too (unless accord's own destroy is what ended it)."""
    global _shared
    with _lock:
        if shared.ending:
            return
        shared.ending = True
        if _shared is shared:
            _shared = None
    if current_world(required=False) is shared.world:
        lifecycle.destroy_process_group()


def _cannot(world: World) -> str | None:
    """Why ``world`` cannot be torch's default group (None: it can)."""
    if not tdist.is_available():
        return "this torch has no torch.distributed"
    if tdist.is_initialized():
        return (
            "torch's default group was initialized already (torch.distributed.init_process_group), "
            "so torch's code uses that group, not accord's world"
        )
    if not isinstance(world.default_group, ProcessGroup):
        return f"backend {world.backend!r} is a plugin's group, which torch's default group cannot wrap"
    if world.store is None and world.size > 1:  # (an MPI world without its diagnostics store)
        return (
            f"backend {world.backend!r}'s world has no store (ACCORD_PROGRESS_INTERVAL=0 turns "
            f"MPI's diagnostics store off, or it could not be made), which torch's default "
            f"group needs"
        )
    if not hasattr(tdist.Backend, "register_backend"):
        return "this torch cannot take third-party backends (torch 2.x needed)"
    return None


def _is_ours(pg: Any, world: World) -> bool:
    return isinstance(pg, AccordProcessGroup) and pg.accord_group is world.default_group
