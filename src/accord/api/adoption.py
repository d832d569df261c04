"""What makes a built world this process's: ``adopt`` (the process's world, with its hooks)
and its device groups.

Owns: ``adopt`` (init's last step, and a newcomer's: the world becomes the process's, and the
process gets its hooks), the hooks themselves (``install_process_hooks``: the exit hook that
says GOODBYE to peers when the interpreter exits normally, SIGUSR1's flight-recorder dump,
fail-fast), and ``add_device_groups`` (a group's torch groups for device tensors, NCCL). Every
way into a job (``lifecycle.init_process_group``, ``admission.join_process_group``) and every
change of its members (``membership``) ends here. Must not know how the world was made or
about the launcher.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .. import config
from ..backend_names import device_provider
from ..diagnostics import debug, fail_fast, flight_recorder
from ..group.process_group import ProcessGroup
from ..timeouts import to_seconds
from ..world import World, current_world, set_process_world

_exit_hook_lock = threading.Lock()
_exit_hook_registered = False
_exit_callbacks: list[Callable[[], None]] = []  # run once at exit, in order
_finalizer_pid = 0  # the process that registered the multiprocessing exit finalizer


def adopt(world: World) -> None:
    """Make ``world`` this process's world, with the process hooks (init's last step)."""
    set_process_world(world)
    install_process_hooks(_destroy_default_world, current_world, dump_flight_recorder_for_signal)


def add_device_groups(world: World, group: Any, devices: dict[str, str], device_id: Any = None) -> None:
    """Make ``group``'s torch group for each device kind of ``devices`` ({"cuda": "nccl"}),
    for the same ranks, meeting in the world's store (every member calls this)."""
    if not devices or not isinstance(group, ProcessGroup):
        return
    if world.store is None:
        raise ValueError(
            f"device backends {devices} need a store to meet in, and this world has "
            f"none: pass store= to init_process_group"
        )
    made = {}
    for kind, name in devices.items():
        prefix = f"{world.store_prefix}/device/{group.group_id:08x}/{kind}/"
        made[kind] = device_provider(name)(
            kind, world.store, prefix, group.rank(), group.size(), to_seconds(group.timeout), device_id
        )
    group.device_groups = made


def install_process_hooks(
    at_exit: Callable[[], None], world_getter: Callable[..., Any], dump: Callable[[str], Any]
) -> None:
    """What every world of a process gets (accord's default world, and the torch backend's):
    ``at_exit`` runs when the process ends normally (it says GOODBYE to the peers), SIGUSR1
    calls ``dump``, and an uncaught exception aborts the groups of ``world_getter()``
    (fail-fast, unless ACCORD_FAIL_FAST=0). Each is registered once per process."""
    _register_exit_hook(at_exit)
    flight_recorder.install_signal_handler(dump)
    debug.show_logs()
    if config.fail_fast():
        fail_fast.install(world_getter)


def _register_exit_hook(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the process ends normally: at interpreter exit (atexit), and in
    a multiprocessing child, whose "fork" start method ends with os._exit() and skips atexit,
    from multiprocessing's own exit finalizers (registered once per process)."""
    global _exit_hook_registered, _finalizer_pid
    with _exit_hook_lock:
        if callback not in _exit_callbacks:
            _exit_callbacks.append(callback)
        if not _exit_hook_registered:
            atexit.register(_run_exit_callbacks)
            _exit_hook_registered = True
        mp = sys.modules.get("multiprocessing")
        if mp is not None and _finalizer_pid != os.getpid() and mp.parent_process() is not None:
            import multiprocessing.util as mp_util

            mp_util.Finalize(None, _run_exit_callbacks, exitpriority=100)
            _finalizer_pid = os.getpid()


def _run_exit_callbacks() -> None:
    for callback in list(_exit_callbacks):
        try:
            callback()
        except Exception:  # noqa: BLE001 — the others must still say goodbye
            pass


def _destroy_default_world() -> None:
    world = current_world(required=False)
    if world is not None:
        set_process_world(None)
        world.destroy()


def dump_flight_recorder_for_signal(reason: str) -> None:
    world = current_world(required=False)
    if world is not None and world.monitor is not None:
        world.monitor.dump(reason)
