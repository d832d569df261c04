"""What went wrong, in words: a worker's failure record and the launcher's final report.

Owns: ``Failure`` (rank, local rank, node, host, pid, exit code or signal, time, the message
and traceback from the worker's error file — torchrun's JSON format, both its old and new
message layouts), its JSON form (nodes exchange failures through the store), and the report
layout (torchrun's "Root Cause (first observed failure)" block, with the time to the
millisecond and the other failures on one line each). Must not know how failures are detected.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

_NOT_AVAILABLE = "<N/A>"
_WIDTH = 60


@dataclass(frozen=True)
class Failure:
    """One worker that ended badly (or a launcher that was lost: rank -1)."""

    rank: int
    local_rank: int
    node_rank: int
    host: str
    pid: int
    exitcode: int
    time: float
    message: str
    traceback: str | None = None
    error_file: str | None = None

    def signal_name(self) -> str | None:
        if self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    def caused_by_a_peer(self) -> bool:
        """Whether the worker says another rank's failure caused its own (accord's PeerError:
        'rank 1 raised ValueError …', 'rank 2 has left the group …'): then it is no root
        cause while a failure it does not blame on a peer exists, whichever exit came first."""
        kind = self.message.split(":", 1)[0].strip().rsplit(".", 1)[-1]
        return kind in ("PeerError", "ProtocolError")

    def summary(self) -> str:
        """One line: 'rank 3 (local_rank 1 on host b) exited with code 1: ValueError: boom'."""
        if self.rank < 0:
            return f"the launcher of node {self.node_rank} on {self.host}: {self.message}"
        where = f"local_rank {self.local_rank} on {self.host}"
        how = (
            f"was killed by {self.signal_name()}"
            if self.exitcode < 0
            else f"exited with code {self.exitcode}"
        )
        return f"rank {self.rank} ({where}) {how}: {self.message}"

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, data: Any) -> Failure:
        return cls(**(json.loads(data) if isinstance(data, (str, bytes)) else data))


def read_error_file(path: str | None) -> tuple[str | None, str | None]:
    """(message, traceback) from a torchrun-format error file; (None, None) when absent."""
    if not path or not os.path.isfile(path):
        return None, None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        message = data["message"]
        if isinstance(message, str):  # torchrun's newer layout: {"message": str, ...}
            return message, data.get("py_callstack") or message
        extra = message.get("extraInfo", {})
        return message.get("message"), extra.get("py_callstack")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"unreadable error file {path} ({type(exc).__name__}: {exc})", None


def make_failure(
    rank: int,
    local_rank: int,
    node_rank: int,
    host: str,
    pid: int,
    exitcode: int,
    when: float,
    error_file: str | None,
    no_python: bool = False,
) -> Failure:
    """A Failure from an exit status and the worker's error file (if it wrote one)."""
    message, callstack = read_error_file(error_file)
    if message is None:
        sig = Failure(rank, local_rank, node_rank, host, pid, exitcode, when, "").signal_name()
        if sig is not None:
            message = f"Signal {-exitcode} ({sig}) received by PID {pid}"
        elif no_python:
            message = f"exit code {exitcode} (--no-python: a command leaves no traceback)"
        else:
            message = f"exit code {exitcode}, no Python exception (os._exit, or a crash)"
    found = error_file if callstack is not None or (error_file and os.path.isfile(error_file)) else None
    return Failure(rank, local_rank, node_rank, host, pid, exitcode, when, message, callstack, found)


def _timestamp(when: float) -> str:
    return datetime.fromtimestamp(when).isoformat(sep="_", timespec="milliseconds")


def _block(index: int, failure: Failure, full: bool) -> str:
    sig = failure.signal_name()
    exitcode = f"{failure.exitcode} (pid: {failure.pid})" + (f" ({sig})" if sig else "")
    rank = (
        f"{failure.rank} (local_rank: {failure.local_rank})"
        if failure.rank >= 0
        else "<none: the launcher itself>"
    )
    lines = [
        f"[{index}]:",
        f"  time      : {_timestamp(failure.time)}",
        f"  host      : {failure.host} (node {failure.node_rank})",
        f"  rank      : {rank}",
        f"  exitcode  : {exitcode}",
    ]
    if full:
        lines.append(f"  error_file: {failure.error_file or _NOT_AVAILABLE}")
        trace = (failure.traceback or failure.message).rstrip("\n").replace("\n", "\n  ")
        lines.append(f"  traceback : {trace}")
    else:
        lines.append(f"  error     : {failure.message}")
    return "\n".join(lines)


def format_report(title: str, root: Failure, others: list[Failure], footer: str = "") -> str:
    """torchrun's failure summary: other failures first (one line each), then the root cause
    (the first failure in time) with its traceback."""
    border, section = "=" * _WIDTH, "-" * _WIDTH
    other_blocks = [_block(i + 1, f, full=False) for i, f in enumerate(others)]
    parts = [
        border,
        f"{title} FAILED",
        section,
        "Failures:",
        "\n".join(other_blocks) or "  <NO_OTHER_FAILURES>",
        section,
        "Root Cause (first observed failure):",
        _block(0, root, full=True),
        border,
    ]
    if footer:
        parts.append(footer)
    return "\n" + "\n".join(parts) + "\n"
