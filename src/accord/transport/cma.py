"""Single-copy reads of a peer's memory: Linux cross-memory attach (``process_vm_readv``).

Owns: the ctypes binding and ``CrossMemory.read(pid, address, dst)``, which copies
``dst.nbytes`` bytes from address ``address`` in process ``pid`` straight into ``dst`` (one
copy, done by the kernel, no shared segment in between). Whether it is permitted (Yama's
ptrace_scope, seccomp, other user) is tested once per group by ``probe``; where it is not,
the algorithms that need it are not chosen. Must not know about collectives or groups.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable

import numpy as np

from ..errors import PeerError


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _binding() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_Iovec),
        ctypes.c_ulong,
        ctypes.POINTER(_Iovec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    return fn


_READV = _binding()
#: Largest read per call (the kernel pins the pages of a request as it goes).
_MAX_READ = 4 << 20


class CrossMemory:
    """Reads from other processes' memory (one object per rank; not thread-safe)."""

    def __init__(self) -> None:
        self._local = _Iovec()
        self._remote = _Iovec()

    @staticmethod
    def available() -> bool:
        return _READV is not None

    def read(self, pid: int, address: int, dst: np.ndarray) -> None:
        """Copy ``dst.nbytes`` bytes at ``address`` in ``pid`` into the contiguous ``dst``.

        Raises:
            PeerError: the process is gone (ESRCH) or the read failed.
        """
        assert _READV is not None
        base, total, done = dst.ctypes.data, dst.nbytes, 0
        while done < total:
            size = min(total - done, _MAX_READ)
            self._local.iov_base, self._local.iov_len = base + done, size
            self._remote.iov_base, self._remote.iov_len = address + done, size
            got = _READV(pid, ctypes.byref(self._local), 1, ctypes.byref(self._remote), 1, 0)
            if got <= 0:
                err = ctypes.get_errno()
                raise PeerError(
                    f"reading process {pid}'s memory failed: {errno.errorcode.get(err, err)} "
                    f"({os.strerror(err)})"
                )
            done += got


def address_of(array: np.ndarray) -> int:
    """Where a contiguous array's data starts in this process."""
    return int(array.ctypes.data)


def probe(pid: int, address: int, expected: bytes) -> bool:
    """Whether this process may read ``pid``'s memory: read ``expected`` back from ``address``."""
    if _READV is None:
        return False
    buf = np.zeros(len(expected), dtype=np.uint8)
    try:
        CrossMemory().read(pid, address, buf)
    except PeerError:
        return False
    return buf.tobytes() == expected
