"""Worker output: prefixed lines on the launcher's console, per-rank log files, the run directory.

Owns: the ``Console`` (whole lines, one writer at a time, so lines of different workers never
mix), the ``OutputPump`` thread that reads every worker's stdout and stderr pipes and turns them
into ``[rank3]: …`` lines on the launcher's stdout and stderr (``TORCHELASTIC_LOG_LINE_PREFIX_
TEMPLATE`` changes the prefix) and into ``stdout.log``/``stderr.log`` files for ``--redirects``
and ``--tee``, and the ``RunDir`` layout (torchrun's: ``<log_dir>/<run_id>_<random>/attempt_<n>/
<local_rank>/{stdout.log,stderr.log,error.json}``; the k-th worker started in the place of
local rank ``<local_rank>``'s during the attempt: ``…/<local_rank>/replacement_<k>/``). Must
not know how workers are started.
"""

from __future__ import annotations

import os
import selectors
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from string import Template
from typing import BinaryIO

from .. import config
from .options import Std

DEFAULT_PREFIX = "[rank${rank}]: "
_READ_BYTES = 1 << 16
_MAX_PARTIAL = 1 << 16  # a longer line without a newline is passed on in pieces


class Console:
    """The launcher's stdout and stderr, written one whole line (or block) at a time."""

    def __init__(self, out: BinaryIO | None = None, err: BinaryIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout.buffer
        self.err = err if err is not None else sys.stderr.buffer
        self._lock = threading.Lock()

    def write(self, stream: BinaryIO, data: bytes) -> None:
        with self._lock:
            try:
                stream.write(data)
                stream.flush()
            except (OSError, ValueError):  # a closed or broken console must not stop the job
                pass

    def say(self, text: str) -> None:
        """A message of the launcher's own, on stderr."""
        self.write(self.err, (text if text.endswith("\n") else text + "\n").encode())


@dataclass
class _Stream:
    """One pipe of one worker and where its lines go."""

    prefix: bytes
    console: BinaryIO | None
    log: BinaryIO | None
    partial: bytes = b""


def line_prefix(rank: int, local_rank: int, role: str) -> bytes:
    template = config.LOG_LINE_PREFIX_TEMPLATE.raw() or DEFAULT_PREFIX
    return Template(template).safe_substitute(rank=rank, local_rank=local_rank, role_name=role).encode()


class OutputPump:
    """A thread that copies worker pipes to the console and log files until each reaches EOF
    (``follow``: until ``close``, taking new pipes meanwhile: workers started later)."""

    def __init__(self, console: Console, follow: bool = False) -> None:
        self._console = console
        self._selector = selectors.DefaultSelector()
        self._open = 0
        self._follow = follow
        self._stopped = False
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, pipe: BinaryIO, prefix: bytes, console: BinaryIO | None, log_path: str | None) -> None:
        """Follow ``pipe``: before ``start``, or at any time before ``close`` with ``follow``."""
        log = open(log_path, "ab", buffering=0) if log_path else None
        with self._lock:
            self._selector.register(pipe, selectors.EVENT_READ, _Stream(prefix, console, log))
            self._open += 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="accordrun-output", daemon=True)
        self._thread.start()

    def drain(self, timeout: float) -> bool:
        """Wait until every pipe reached EOF (True) or ``timeout`` passed (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._open > 0 and time.monotonic() < deadline:
                self._lock.wait(max(0.0, deadline - time.monotonic()))
            return self._open <= 0

    def close(self) -> None:
        """Stop following the pipes that are still open (their writers may be stuck)."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped or (self._open <= 0 and not self._follow):
                    break
            for key, _ in self._selector.select(timeout=0.2):
                self._read(key.fileobj, key.data)  # type: ignore[arg-type]
        for key in list(self._selector.get_map().values()):
            self._read_rest(key.fileobj, key.data)  # type: ignore[arg-type]
            self._finish(key.fileobj, key.data)  # type: ignore[arg-type]
        self._selector.close()

    def _read_rest(self, pipe: BinaryIO, stream: _Stream) -> None:
        """Stopped before EOF (a writer still holds the pipe): copy what is already in it,
        without waiting for more, so no line the workers wrote is lost."""
        try:
            os.set_blocking(pipe.fileno(), False)
        except (OSError, ValueError):
            return
        for _ in range(1024):  # at most 64 MiB: a writer that keeps writing cannot hold us
            try:
                data = os.read(pipe.fileno(), _READ_BYTES)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            self._copy(stream, data)

    def _read(self, pipe: BinaryIO, stream: _Stream) -> None:
        try:
            data = os.read(pipe.fileno(), _READ_BYTES)
        except OSError:
            data = b""
        if not data:
            self._finish(pipe, stream)
            with self._lock:
                self._open -= 1
                self._lock.notify_all()
            return
        self._copy(stream, data)

    def _copy(self, stream: _Stream, data: bytes) -> None:
        """Log ``data`` and show its complete lines, with the worker's prefix."""
        if stream.log is not None:
            stream.log.write(data)
        stream.partial += data
        lines = stream.partial.split(b"\n")
        stream.partial = lines.pop()
        if len(stream.partial) > _MAX_PARTIAL:
            lines.append(stream.partial)
            stream.partial = b""
        if lines and stream.console is not None:
            self._console.write(stream.console, b"".join(stream.prefix + ln + b"\n" for ln in lines))

    def _finish(self, pipe: BinaryIO, stream: _Stream) -> None:
        if stream.partial and stream.console is not None:
            self._console.write(stream.console, stream.prefix + stream.partial + b"\n")
        stream.partial = b""
        try:
            self._selector.unregister(pipe)
        except (KeyError, ValueError):
            pass
        pipe.close()
        if stream.log is not None:
            stream.log.close()


class RunDir:
    """Where one launcher keeps its logs and error files (a temporary one without --log-dir)."""

    def __init__(self, log_dir: str | None, run_id: str) -> None:
        self._temporary = log_dir is None
        base = tempfile.mkdtemp(prefix="accordrun_") if log_dir is None else log_dir
        os.makedirs(base, exist_ok=True)
        self.base = base
        self.path = tempfile.mkdtemp(prefix=f"{run_id}_", dir=base)

    def worker_dir(self, restart: int, local_rank: int, replacement: int = 0) -> str:
        """The folder of local rank ``local_rank``'s worker in attempt ``restart`` (of its
        ``replacement``-th replacement in that attempt, if not 0)."""
        path = os.path.join(self.path, f"attempt_{restart}", str(local_rank))
        if replacement:
            path = os.path.join(path, f"replacement_{replacement}")
        os.makedirs(path, exist_ok=True)
        return path

    def cleanup(self) -> None:
        """Remove the directory if it was a temporary one."""
        if self._temporary:
            shutil.rmtree(self.base, ignore_errors=True)


def stream_targets(
    console: Console, local_rank: int, redirects: dict[int, Std], tee: dict[int, Std], shown: set[int] | None
) -> dict[str, tuple]:
    """For 'stdout' and 'stderr' of one worker: (console stream or None, log or not)."""
    targets = {}
    for name, flag, stream in (("stdout", Std.OUT, console.out), ("stderr", Std.ERR, console.err)):
        redirected = bool(redirects.get(local_rank, Std.NONE) & flag)
        teed = bool(tee.get(local_rank, Std.NONE) & flag)
        visible = not redirected and (shown is None or local_rank in shown)
        targets[name] = (stream if visible else None, redirected or teed)
    return targets
