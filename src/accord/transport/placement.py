"""Keeping the ranks of one host off each other's CPU.

Owns: ``CpuPlacement`` — which CPU this thread runs on (``sched_getcpu``), and moving it to
another CPU it may use when a peer it waits for runs on the same one. Linux sometimes leaves
two busy ranks on one CPU while another CPU idles: a wake-up from a socket puts the woken
task on the waker's CPU, and the load balancer is slow to move tasks it considers cache-hot.
Measured on a 2-core VM, world 2: in about one launch of ten both ranks shared a CPU for the
whole run, and a 1 MiB all_reduce took 420–590 µs instead of 135. The move is
``sched_setaffinity`` to the chosen CPU (the kernel migrates the thread at once), then back
to the full mask: nothing stays pinned, and a mask the user set (taskset, numactl, a
launcher's binding) is what is restored.
Must not know about segments, collectives or groups: the shared-memory domain says which CPU
each peer last reported and asks ``move_off``; the ring-polling mesh looks its local peers up
in /proc (``cpu_of``).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Iterable


def _getcpu_binding() -> Callable[[], int] | None:
    if not sys.platform.startswith("linux") or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    try:
        if fn() < 0:
            return None
    except OSError:  # pragma: no cover - a libc whose sched_getcpu fails
        return None
    return fn


_GETCPU = _getcpu_binding()


def available() -> bool:
    """This platform can say which CPU a thread is on and move it."""
    return _GETCPU is not None


def current_cpu() -> int:
    """The CPU the calling thread runs on now (-1 where that cannot be known)."""
    return _GETCPU() if _GETCPU is not None else -1


def cpu_of(pid: int) -> int:
    """The CPU process ``pid``'s main thread last ran on (-1 where /proc does not say)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[36])  # field 39, "processor"
    except (OSError, ValueError, IndexError):
        return -1


def move_off(cpu: int, taken: Iterable[int], salt: int) -> int | None:
    """Move the calling thread from ``cpu`` to a CPU it may run on that is not in ``taken``
    (the CPUs its peers were last seen on); ``salt`` (the rank) spreads ranks that move at
    once over different CPUs. Returns the new CPU, or None where there was none to go to or
    the kernel refused. The thread's affinity mask is the same afterwards."""
    try:
        allowed = os.sched_getaffinity(0)
    except OSError:  # pragma: no cover - defensive: getaffinity of oneself does not fail
        return None
    busy = set(taken) | {cpu}
    free = sorted(c for c in allowed if c not in busy)
    if not free:
        return None
    target = free[salt % len(free)]
    try:
        os.sched_setaffinity(0, {target})  # migrates the calling thread now
    except OSError:
        return None
    finally:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:  # pragma: no cover - restoring a mask we were just given
            pass
    return target
