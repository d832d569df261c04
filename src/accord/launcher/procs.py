"""The workers of one node for one attempt: starting, watching, signalling and stopping them.

Owns: the worker command lines (through the bootstrap ``worker.py``), ``LocalGroup`` (one
process group per worker, a waiter thread per worker that timestamps its exit, a new process
in the place of one that ended — ``replace`` —, forwarding a signal to every group, SIGTERM →
grace → SIGKILL), and the ``Reaper`` client that keeps the ``reaper.py`` watchdog informed.
Must not know how ranks were agreed or what the job does.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_SCRIPT = os.path.join(HERE, "worker.py")
REAPER_SCRIPT = os.path.join(HERE, "reaper.py")


def worker_command(
    target: str, args: Sequence[str], module: bool, no_python: bool, local_rank_arg: str | None = None
) -> list[str]:
    """The command line of one worker: the bootstrap, then the user's target and arguments
    (``--local-rank=N`` first for the legacy launcher)."""
    head = [sys.executable, "-S" if no_python else "-u", WORKER_SCRIPT, "--parent", str(os.getpid())]
    mode = ["--exec"] if no_python else (["-m"] if module else [])
    extra = [local_rank_arg] if local_rank_arg else []
    return [*head, *mode, target, *extra, *args]


@dataclass(frozen=True)
class WorkerExit:
    """A worker's end: its exit status (negative: killed by that signal) and wall-clock time."""

    local_rank: int
    pid: int
    returncode: int
    time: float

    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


class Reaper:
    """The launcher's end of the reaper.py watchdog (see there)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-S", REAPER_SCRIPT],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            self._proc = None  # no watchdog: workers still die with us (PDEATHSIG)

    def _send(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (OSError, ValueError):
            self._proc = None

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def close(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalGroup:
    """This node's workers for one attempt, each the leader of its own process group."""

    def __init__(self, reaper: Reaper | None = None) -> None:
        self._reaper = reaper
        self.procs: list[subprocess.Popen] = []  # the current worker of each local rank
        self.exits: dict[int, WorkerExit] = {}
        self._replaced: list[subprocess.Popen] = []  # workers that ended and were replaced
        self._events: queue.Queue[WorkerExit] = queue.Queue()
        # reentrant: the signal handler (``shutdown``) runs in the main thread, maybe while
        # the main thread holds it
        self._lock = threading.RLock()

    def start(self, commands: Sequence[list[str]], envs: Sequence[dict[str, str]]) -> None:
        """Start one worker per command (local rank = index). Call from the main thread:
        PR_SET_PDEATHSIG fires when the *thread* that forked the child ends."""
        for local_rank, (command, env) in enumerate(zip(commands, envs)):
            proc = self._spawn(command, env)
            self.procs.append(proc)
            self._follow(local_rank, proc)

    def replace(self, local_rank: int, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        """Start a new worker in the place of ``local_rank``'s, which has ended (its exit
        was taken from ``next_exit``); what the old one started is killed. From the main
        thread, as ``start``."""
        with self._lock:
            old = self.procs[local_rank]
            if local_rank not in self.exits or self.exits[local_rank].pid != old.pid:
                raise RuntimeError(f"local rank {local_rank}'s worker (pid {old.pid}) has not ended")
        _killpg(old.pid, signal.SIGKILL)  # its children, if it left any
        if self._reaper is not None:
            self._reaper.forget(old.pid)
        proc = self._spawn(command, env)
        with self._lock:
            self._replaced.append(old)
            self.procs[local_rank] = proc
            del self.exits[local_rank]
        self._follow(local_rank, proc)
        return proc

    def _spawn(self, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        if self._reaper is not None:
            self._reaper.watch(proc.pid)
        return proc

    def _follow(self, local_rank: int, proc: subprocess.Popen) -> None:
        """A thread that waits for ``proc`` (local rank ``local_rank``'s worker) to end."""
        threading.Thread(
            target=self._wait, args=(local_rank, proc), daemon=True, name=f"accordrun-wait-{local_rank}"
        ).start()

    def _wait(self, local_rank: int, proc: subprocess.Popen) -> None:
        returncode = proc.wait()
        event = WorkerExit(local_rank, proc.pid, returncode, time.time())
        with self._lock:
            self.exits[local_rank] = event
        self._events.put(event)

    def next_exit(self, timeout: float) -> WorkerExit | None:
        """The next worker to end, waiting up to ``timeout``; None if none did."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def running(self) -> list[int]:
        with self._lock:
            return [i for i in range(len(self.procs)) if i not in self.exits]

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process group of every worker still running."""
        with self._lock:
            pids = [self.procs[i].pid for i in range(len(self.procs)) if i not in self.exits]
        for pid in pids:
            _killpg(pid, sig)

    def stop(self, grace: float, tick: Callable[[], None] | None = None) -> None:
        """SIGTERM every running worker, SIGKILL what is left after ``grace`` seconds, then
        SIGKILL whatever the workers started (their process groups). ``tick`` is called while
        waiting (the launcher's heartbeat)."""
        if self.running():
            self.signal(signal.SIGTERM)
            self.wait_all(grace, tick)
        if self.running():
            self.signal(signal.SIGKILL)
            self.wait_all(10.0, tick)
        self.kill_leftovers()

    def wait_all(self, timeout: float, tick: Callable[[], None] | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.01)
            if tick is not None:
                tick()
        return not self.running()

    def kill_leftovers(self) -> None:
        """SIGKILL each worker's process group (grandchildren included) and forget it."""
        with self._lock:
            procs = [*self._replaced, *self.procs]
        for proc in procs:
            _killpg(proc.pid, signal.SIGKILL)
            if self._reaper is not None:
                self._reaper.forget(proc.pid)
