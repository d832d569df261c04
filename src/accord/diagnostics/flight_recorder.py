"""Flight-recorder dumps: every group's recent calls of this rank, as one JSON file.

Owns: the dump format (``FORMAT`` below), writing it atomically, the default directory, and
the SIGUSR1 handler that dumps on demand (``kill -USR1 <pid>`` on a hung rank). Must not know
when a failure happens (the monitor calls ``dump``) or how dumps are merged (``merge``).

The file of rank N is ``<dir>/rank<N>.json``::

    {"format": "accord-flight-recorder/1", "rank": 2, "world_size": 4, "pid": 123,
     "host": "node-a", "time": 1790000000.0, "reason": "timeout: all_reduce #12 on rank 2 …",
     "groups": [{"name": "0", "desc": "default_pg", "id": 0, "ranks": [0, 1, 2, 3], "rank": 2,
                 "broken": true, "entries": [{"seq": 11, "op": "broadcast", "state":
                 "completed", "start": …, "end": …, "duration_s": …, "dtype": "float32",
                 "count": 1024, "root": 0, "algo": 1, "nbytes": 4096}, …],
                 "p2p": [{"n": 7, "op": "recv", "peer": 0, "tag": 3, "nbytes": 64,
                          "state": "started", "start": …, "end": null, …}, …],
                 "stats": {"all_reduce": {"calls": 11, "bytes": …, …}}}]}

``entries`` are the group's collective calls by sequence number; ``p2p`` its point-to-point
operations (send, recv, isend, irecv) in the order this rank posted them, ``peer`` a global
rank (null: a receive from any rank that got nothing yet). Dumps written before p2p was
recorded have no ``p2p``: readers take it as empty. ``membership`` lists the membership
changes (shrink_group, grow_group, join_process_group) that led to this world, oldest first:
``{"change": 1, "what": "shrink_group", "time": …, "size": [4, 3], "rank": [3, 2],
"excluded": [2]}`` (``size`` and ``rank``: before and after; ``excluded`` in the old ranks;
a growth has ``admitted``, the number of newcomers); empty (or absent, in older dumps) when
the job never changed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import config
from ..group.process_group import ProcessGroup

FORMAT = "accord-flight-recorder/1"


def default_directory(job: str) -> str | None:
    """Where automatic dumps of job ``job`` go; None when they are turned off
    (ACCORD_FLIGHT_RECORDER_DIR=off)."""
    chosen = config.flight_recorder_dir()
    if chosen == "":
        return None
    if chosen is not None:
        return chosen
    label = "".join(c if c.isalnum() or c in "-_." else "_" for c in job)
    return os.path.join(tempfile.gettempdir(), "accord-flight-recorder", label)


def snapshot(
    rank: int,
    world_size: int,
    groups: Sequence[ProcessGroup],
    reason: str,
    membership: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Everything a dump holds, as plain data."""
    return {
        "format": FORMAT,
        "rank": rank,
        "world_size": world_size,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "time": time.time(),
        "reason": reason,
        "membership": list(membership),
        "groups": [
            {
                "name": g.group_name,
                "desc": g.group_desc,
                "id": g.group_id,
                "ranks": g.ranks,
                "rank": g.rank(),
                "broken": g.is_broken(),
                "entries": g.recorder.entries(),
                "p2p": g.recorder.p2p_entries(),
                "stats": g.recorder.stats(),
            }
            for g in groups
        ],
    }


def write(data: dict[str, Any], path: str) -> str:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".rank", suffix=".json.tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def dump(
    rank: int,
    world_size: int,
    groups: Sequence[ProcessGroup],
    reason: str,
    job: str,
    path: str | None = None,
    membership: Sequence[dict[str, Any]] = (),
) -> str | None:
    """Write this rank's dump to ``path`` (default ``<default dir>/rank<N>.json``); returns
    the path, or None when automatic dumps are off and no path was given."""
    if path is None:
        directory = default_directory(job)
        if directory is None:
            return None
        path = os.path.join(directory, f"rank{rank}.json")
    return write(snapshot(rank, world_size, groups, reason, membership), path)


_installed_lock = threading.Lock()
_installed = False
_dumpers: list[Callable[[str], Any]] = []


def install_signal_handler(dump_now: Callable[[str], Any]) -> bool:
    """Make SIGUSR1 dump the flight recorder (``dump_now(reason)``, every one given), unless
    the program handles SIGUSR1 itself or this is not the main thread. Returns whether it
    is installed."""
    global _installed
    if not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread():
        return False
    with _installed_lock:
        if dump_now not in _dumpers:
            _dumpers.append(dump_now)
        if _installed:
            return True
        if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
            return False

        def on_sigusr1(signum: int, frame: Any) -> None:
            for dump in list(_dumpers):
                try:
                    dump("SIGUSR1")
                except Exception:  # noqa: BLE001 — a signal handler must not raise into user code
                    pass

        signal.signal(signal.SIGUSR1, on_sigusr1)
        _installed = True
        return True
