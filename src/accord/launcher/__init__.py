"""Launching jobs: ``accordrun`` (torchrun's command line), the legacy launcher, and ``spawn``.

Owns: the command line (``options``, ``cli``), the worker environment contract (``env``), the
worker bootstrap (``worker``), local worker processes and their output (``procs``, ``output``,
``reaper``), how the launchers of several nodes meet and agree (``nodes``, ``rounds``) and
know each other alive (``liveness``), the main loop (``agent``), signals (``shutdown``),
failure reports (``report``) and ``spawn``. May use rendezvous, store
and the foundation; must not know groups, collectives, transports or the functional API:
workers reach those through env:// like any torchrun worker.

Only ``spawn``'s names are imported here, so ``import accord`` stays cheap.
"""

from .spawn import (
    ProcessContext,
    ProcessException,
    ProcessExitedException,
    ProcessRaisedException,
    spawn,
    start_processes,
)

__all__ = [
    "ProcessContext",
    "ProcessException",
    "ProcessExitedException",
    "ProcessRaisedException",
    "spawn",
    "start_processes",
]
