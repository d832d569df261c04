"""Single-copy reads and writes of a peer's memory: Linux cross-memory attach
(``process_vm_readv`` / ``process_vm_writev``).

Owns: the ctypes bindings, ``CrossMemory.read(pid, address, dst)``, which copies
``dst.nbytes`` bytes from address ``address`` in process ``pid`` straight into ``dst`` (one
copy, done by the kernel, no shared segment in between), and ``CrossMemory.write(pid,
address, src)``, its mirror. Whether they are permitted (Yama's ptrace_scope, seccomp, other
user) is tested once per group by ``probe``, which reads and writes back a word; where it
fails, the algorithms that need them are not chosen. Must not know about collectives or
groups.
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


def _binding(name: str) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, name)
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
    return fn  # type: ignore[no-any-return]  # (a ctypes function)


_READV = _binding("process_vm_readv")
_WRITEV = _binding("process_vm_writev")
#: Largest read per call (the kernel pins the pages of a request as it goes).
_MAX_READ = 4 << 20


class CrossMemory:
    """Reads from other processes' memory (one object per rank; not thread-safe)."""

    def __init__(self) -> None:
        self._local = _Iovec()
        self._remote = _Iovec()

    @staticmethod
    def available() -> bool:
        return _READV is not None and _WRITEV is not None

    def read(self, pid: int, address: int, dst: np.ndarray) -> None:
        """Copy ``dst.nbytes`` bytes at ``address`` in ``pid`` into the contiguous ``dst``.

        Raises:
            PeerError: the process is gone (ESRCH) or the read failed.
        """
        assert _READV is not None
        self._copy(_READV, "reading", pid, address, dst.ctypes.data, dst.nbytes)

    def write(self, pid: int, address: int, src: np.ndarray) -> None:
        """Copy the contiguous ``src`` to ``address`` in ``pid`` (``src.nbytes`` bytes).

        Raises:
            PeerError: the process is gone (ESRCH) or the write failed.
        """
        assert _WRITEV is not None
        self._copy(_WRITEV, "writing", pid, address, src.ctypes.data, src.nbytes)

    def _copy(
        self, call: Callable[..., int], doing: str, pid: int, address: int, base: int, total: int
    ) -> None:
        done = 0
        while done < total:
            size = min(total - done, _MAX_READ)
            self._local.iov_base, self._local.iov_len = base + done, size
            self._remote.iov_base, self._remote.iov_len = address + done, size
            got = call(pid, ctypes.byref(self._local), 1, ctypes.byref(self._remote), 1, 0)
            if got <= 0:
                err = ctypes.get_errno()
                raise PeerError(
                    f"{doing} process {pid}'s memory failed: {errno.errorcode.get(err, err)} "
                    f"({os.strerror(err)})"
                )
            done += got


def address_of(array: np.ndarray) -> int:
    """Where a contiguous array's data starts in this process."""
    return int(array.ctypes.data)


def probe(pid: int, address: int, expected: bytes) -> bool:
    """Whether this process may read and write ``pid``'s memory: read ``expected`` back from
    ``address``, then write the same bytes there (a seccomp filter may allow one and not the
    other)."""
    if _READV is None or _WRITEV is None:
        return False
    buf = np.zeros(len(expected), dtype=np.uint8)
    try:
        memory = CrossMemory()
        memory.read(pid, address, buf)
        if buf.tobytes() != expected:
            return False
        memory.write(pid, address, buf)
    except PeerError:
        return False
    return True
