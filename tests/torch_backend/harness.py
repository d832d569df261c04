"""Run one torch program on N real processes, on a given backend, and collect each rank's result.

``run(program, backend, world_size, **kwargs)`` starts ``world_size`` processes (forked by a
server that imported torch once: tests/torch_forkserver.py), each
joining torch.distributed's default group over env:// on ``backend`` ("gloo" or "accord"),
then calling ``programs.<program>(rank, world_size, **kwargs)`` (or, for a ``program`` spelled
"package.module:function", that module's function; "module:function" names a module of this
package); the return values (plain Python data) come back over a pipe in rank order. A failure on any rank raises
``ProgramFailed`` with every failing rank's traceback; every process is killed at the end.
"""

from __future__ import annotations

import importlib
import os
import socket
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import wait
from typing import Any

import torch_forkserver


class ProgramFailed(AssertionError):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _child(program: str, backend: str, rank: int, world_size: int, port: int, kwargs: dict,
           env: dict, inherited: dict, conn: Any) -> None:
    os.environ.clear()  # the parent's environment now, as a spawned child would start with
    os.environ.update(inherited)  # (a forked one has its server's, from the session's start)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1",
                      LOCAL_WORLD_SIZE=str(world_size), TORCH_CPP_LOG_LEVEL="ERROR", **env)
    try:
        import importlib

        import torch
        import torch.distributed as dist

        from . import programs

        module, _, program = program.rpartition(":")
        if module and "." not in module:  # "<module of this package>:<function>"
            module = f"{__package__}.{module}"
        where = importlib.import_module(module) if module else programs

        torch.set_num_threads(1)
        timeout = timedelta(seconds=kwargs.pop("pg_timeout", 60))
        if kwargs.pop("self_init", False):  # the program calls init_process_group itself
            kwargs["backend"] = backend
        else:
            dist.init_process_group(backend, timeout=timeout)
        try:
            value = getattr(where, program)(rank, world_size, **kwargs)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
        conn.send(("ok", value))
    except BaseException:  # noqa: BLE001 — reported to the parent
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run(program: str, backend: str, world_size: int, timeout: float = 120.0,
        env: dict | None = None, dies: tuple[int, ...] = (), **kwargs: Any) -> list[Any]:
    """Run ``program`` (retried on a new port if the free port was taken meanwhile); the
    ranks in ``dies`` are expected to exit without a result (theirs is None)."""
    for attempt in range(3):
        try:
            return _run_once(program, backend, world_size, timeout, env, kwargs, dies)
        except ProgramFailed as exc:
            if attempt == 2 or "address already in use" not in str(exc).lower():
                raise
    raise AssertionError("unreachable")


def _run_once(program: str, backend: str, world_size: int, timeout: float, env: dict | None,
              kwargs: dict, dies: tuple[int, ...]) -> list[Any]:
    ctx = torch_forkserver.context()
    port = free_port()
    readers, procs = {}, []
    for rank in range(world_size):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, daemon=True, args=(program, backend, rank, world_size,
                                                             port, dict(kwargs), env or {},
                                                             dict(os.environ), writer))
        proc.start()
        writer.close()
        readers[reader] = rank
        procs.append(proc)
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    give_up = time.monotonic() + timeout
    try:
        while readers and time.monotonic() < give_up:
            for reader in wait(list(readers), timeout=0.5):
                rank = readers.pop(reader)
                try:
                    kind, value = reader.recv()
                except EOFError:
                    if rank in dies:
                        results[rank] = None
                        continue
                    kind, value = "error", f"rank {rank} died (exit code {procs[rank].exitcode})"
                (results if kind == "ok" else errors)[rank] = value
                if errors:  # the others may be stuck with it: give them a moment only
                    give_up = min(give_up, time.monotonic() + 5)
        for rank in readers.values():
            errors.setdefault(rank, f"rank {rank} did not finish in time")
    finally:
        for proc in procs:
            proc.join(timeout=5 if not errors else 0.5)
            if proc.is_alive():
                proc.kill()
                proc.join(3)
    if errors:
        raise ProgramFailed(f"{program} on {backend} (world {world_size}) failed:\n" + "\n".join(
            f"--- rank {r} ---\n{text}" for r, text in sorted(errors.items())))
    return [results[r] for r in range(world_size)]
