"""``accord.spawn``: torch.multiprocessing.spawn — run ``fn(i, *args)`` in ``nprocs`` processes.

Owns: starting the children (multiprocessing, "spawn" by default), running ``fn`` in each with
its exception's traceback saved to a per-child error file, tying each child's life to the
parent's (PR_SET_PDEATHSIG: SIGINT, as torch), ``ProcessContext.join`` (the first child to fail
stops the others: SIGTERM, then SIGKILL after the grace period) and the exceptions that bring
the failure into the parent: ``ProcessRaisedException`` (with the child's traceback) and
``ProcessExitedException`` (exit code or signal name). Names, signatures and messages are
torch's. Must not know about process groups or the env:// contract: ``fn`` sets those up.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1


class ProcessException(Exception):
    """A spawned process failed (torch.multiprocessing's name); ``error_index`` is its index
    (the ``i`` given to ``fn``), ``error_pid`` its process id (also ``pid``)."""

    __slots__ = ["error_index", "error_pid"]

    def __init__(self, msg: str, error_index: int, error_pid: int) -> None:
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.error_pid = error_pid

    @property
    def pid(self) -> int:
        return self.error_pid

    def __reduce__(self) -> tuple:
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """The process's ``fn`` raised; the message holds the child's traceback."""


class ProcessExitedException(ProcessException):
    """The process died by a signal or exited with a non-zero code without raising."""

    __slots__ = ["exit_code"]

    def __init__(
        self, msg: str, error_index: int, error_pid: int, exit_code: int, signal_name: str | None = None
    ) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self) -> tuple:
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code, self.signal_name)


def _die_with_parent(sig: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def _wrap(fn: Callable[..., Any], i: int, args: tuple, error_file: str) -> None:
    """The child's entry point (module level, so "spawn" can pickle it)."""
    _die_with_parent(signal.SIGINT)
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent is gone or stopping us: exit quietly
    except Exception:  # noqa: BLE001 - every error goes to the parent
        import traceback

        with open(error_file, "wb") as handle:
            pickle.dump(traceback.format_exc(), handle)
        sys.exit(1)


def _signal_name(exitcode: int) -> str:
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"<Unknown signal {-exitcode}>"


class ProcessContext:
    """The children of one spawn: ``processes``, ``pids()``, and ``join``."""

    def __init__(self, processes: list, error_files: list[str], folder: str | None = None) -> None:
        self.error_files = error_files
        self.processes = processes
        self.sentinels = {process.sentinel: index for index, process in enumerate(processes)}
        self._folder = folder

    def pids(self) -> list[int]:
        return [int(process.pid) for process in self.processes]

    def _join_all(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.0, end - time.monotonic()))

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        """Wait up to ``timeout`` for the children. True when all have ended well, False if
        some still run; if one failed, stop the others (SIGTERM, then SIGKILL after
        ``grace_period``, default 30 s) and raise ProcessRaisedException or
        ProcessExitedException naming it."""
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            index = self.sentinels.pop(sentinel)
            self.processes[index].join()
            if self.processes[index].exitcode != 0:
                failed = index
                break
        if failed is None:
            if not self.sentinels:
                self._cleanup()
            return not self.sentinels
        self._stop_others(grace_period)
        raise self._exception(failed)

    def _stop_others(self, grace_period: float | None) -> None:
        if grace_period is not None:
            self._join_all(grace_period)
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        self._join_all(30.0 if grace_period is None else grace_period)
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join()

    def _exception(self, index: int) -> ProcessException:
        process, path = self.processes[index], self.error_files[index]
        try:
            if not os.access(path, os.R_OK):
                code = process.exitcode
                if code < 0:
                    name = _signal_name(code)
                    return ProcessExitedException(
                        f"process {index:d} terminated with signal {name}", index, process.pid, code, name
                    )
                return ProcessExitedException(
                    f"process {index:d} terminated with exit code {code:d}", index, process.pid, code
                )
            with open(path, "rb") as handle:
                trace = pickle.load(handle)
            message = f"\n\n-- Process {index:d} terminated with the following error:\n{trace}"
            return ProcessRaisedException(message, index, process.pid)
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def start_processes(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """Start ``nprocs`` processes running ``fn(i, *args)`` with ``start_method``
    (torch.multiprocessing.start_processes); see ``spawn``."""
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
    context = multiprocessing.get_context(start_method)
    folder = tempfile.mkdtemp(prefix="accord-spawn-")
    error_files = [os.path.join(folder, f"{i}.pickle") for i in range(nprocs)]
    processes = []
    for i in range(nprocs):
        # typeshed's BaseContext lacks Process; every context get_context returns has it
        process = context.Process(  # type: ignore[attr-defined]
            target=_wrap, args=(fn, i, args, error_files[i]), daemon=daemon
        )
        process.start()
        processes.append(process)
    spawned = ProcessContext(processes, error_files, folder)
    if not join:
        return spawned
    while not spawned.join():
        pass
    return None


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """Run ``fn(i, *args)`` for i in 0 … nprocs-1, each in a new process (torch's spawn).

    ``fn`` must be importable (defined at module level). If a process raises, the others are
    stopped and ``ProcessRaisedException`` is raised here, with its traceback; if one dies
    otherwise, ``ProcessExitedException`` with its exit code or signal name.

    Returns:
        None with ``join=True`` (all succeeded); else a ProcessContext to ``join()``.
    """
    if start_method != "spawn":
        warnings.warn(
            f"This method only supports start_method=spawn (got: {start_method}).\n"
            f"To use a different start_method use:\n\t\t "
            f"accord.launcher.spawn.start_processes(...)",
            FutureWarning,
            stacklevel=2,
        )
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
