"""Running launchers from tests: a handle that collects output as it comes, with bounded waits.

Every process is started in its own session, so ``kill()`` takes the launcher down with
SIGKILL; its workers then die by PR_SET_PDEATHSIG and their children by the reaper — the very
behaviour under test, and the reason nothing outlives a test.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
#: Variables of an outer launcher or cluster that must not leak into the launchers under test.
_SCRUB = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
          "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "ACCORD_SOCKET_IFNAME",
          "GLOO_SOCKET_IFNAME")


#: TMPDIR of the launchers under test: a failed job keeps its run directory (error files).
_SCRATCH = tempfile.mkdtemp(prefix="accordrun-tests-")
atexit.register(shutil.rmtree, _SCRATCH, True)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.startswith("PET_")}
    env["TMPDIR"] = _SCRATCH
    env.update(extra)
    return env


class Launched:
    """A running command whose stdout and stderr lines are collected by threads."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None,
                 cwd: str | Path | None = None) -> None:
        self.command = command
        self.proc = subprocess.Popen(command, env=env or clean_env(), cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [self._follow(self.proc.stdout, self.out),
                         self._follow(self.proc.stderr, self.err)]

    @staticmethod
    def _follow(pipe, lines: list[str]) -> threading.Thread:  # noqa: ANN001
        def run() -> None:
            for raw in pipe:
                lines.append(raw.decode(errors="replace").rstrip("\n"))
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    @property
    def stdout(self) -> str:
        return "\n".join(self.out)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline or (self.proc.poll() is not None and not predicate()):
                if self.proc.poll() is not None:
                    time.sleep(0.2)  # let the readers catch up
                    if predicate():
                        return
                raise AssertionError(f"{what}: not seen within {timeout} s (exit code "
                                     f"{self.proc.poll()})\nstdout:\n{self.stdout}\n"
                                     f"stderr:\n{self.stderr}")
            time.sleep(0.02)

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for the exit (killing the process after ``timeout``) and for the output."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.command} did not finish within {timeout} s\nstdout:\n"
                                 f"{self.stdout}\nstderr:\n{self.stderr}") from None
        for reader in self._readers:
            reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)


def accordrun(*args: str, module: str = "accord.run", prefix: list[str] | None = None,
              env: dict[str, str] | None = None, cwd: str | Path | None = None) -> Launched:
    """Start ``python -m accord.run ARGS`` (behind ``prefix``, e.g. ``ip netns exec ns``)."""
    return Launched([*(prefix or []), sys.executable, "-m", module, *args], env, cwd)


def run_to_end(*args: str, timeout: float = 60.0, **kwargs) -> Launched:  # noqa: ANN003
    launched = accordrun(*args, **kwargs)
    launched.finish(timeout)
    return launched


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``sig`` (/proc's SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (int(sig) - 1) & 1)
    except FileNotFoundError:
        pass
    return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` for all of them to end."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
