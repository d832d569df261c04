"""The multiprocessing context of the tests' torch children: "forkserver", whose server
imports torch once per pytest session (torch_preload.py), so that each child starts with torch
loaded instead of importing it again, as a "spawn" child does: about 1.5 s of CPU per process,
most of a small job's time on a 2-core runner.

The children run the same code as before (the same module-level function, the same
environment set by the child before anything of accord is imported): importing torch
registers backend "accord" through its entry point but imports no accord. Only children that
import torch anyway use this context: the NumPy-only jobs check that torch is never imported,
so they keep "spawn". The server starts with the environment of the test that first uses it,
and a forked child would inherit that one: so the harnesses (harness.py, runner.py) hand each
child the parent's environment at its start, which the child puts in place before anything
else, as a spawned child starts with it (a test's monkeypatch.setenv reaches its children).
"""

from __future__ import annotations

import multiprocessing
from typing import Any

#: Imported by the server before it forks any child (a module of this directory: the server
#: gets the parent's sys.path, which tests/conftest.py extends with it).
PRELOAD = ["torch_preload"]


def context() -> Any:
    """The "forkserver" context, its server set to preload torch (started on first use)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
