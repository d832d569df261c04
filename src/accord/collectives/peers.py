"""The narrow interface an algorithm sees: its rank, the group size, and messages by step.

Owns: the ``Peers`` protocol (and ``PointToPoint``, its part a schedule that only sends and
receives needs: the barrier's). Algorithms are plain functions over it; they never see sockets,
stores, groups or globals, which is why they can be tested over any transport. One Peers
object is bound to one collective call (its group, sequence number and fingerprint), so
algorithms number their messages with ``step`` from 0 and never collide with other calls.

Ranks are group ranks (0 … size-1). Buffers are contiguous 1-D NumPy arrays; a receive must
name a buffer of exactly the size the sender sends (else CollectiveMismatchError).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..config import Tunables


class Handle(Protocol):
    """An outstanding send or receive; pass it to ``Peers.wait``."""


class PointToPoint(Protocol):
    """What a schedule that only sends and receives into given buffers needs (``Peers``
    without any-size receives, scratch or tunables: mesh_barrier's peers are no more)."""

    rank: int
    size: int

    def isend(self, peer: int, buf: np.ndarray, step: int) -> Handle:
        """Start sending ``buf`` to ``peer``; ``buf`` must not change until waited for."""
        ...

    def irecv(self, peer: int, buf: np.ndarray, step: int) -> Handle:
        """Start receiving message ``step`` from ``peer`` into ``buf``."""
        ...

    def wait(self, *handles: Any) -> None:
        """Block until every handle completes (raises on failure or at the call's deadline)."""
        ...


class Peers(PointToPoint, Protocol):
    tunables: Tunables  # segment size etc., fixed when the group was created

    def irecv_any(self, peer: int, step: int) -> Handle:
        """Start receiving message ``step`` from ``peer``, whatever its size; after ``wait``
        the handle's ``buf`` is a memoryview of the bytes."""
        ...

    def scratch(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray:
        """A scratch array of ``count`` elements, reused across calls (contents undefined);
        ``which`` (0 or 1) picks one of two independent buffers."""
        ...


def send(peers: PointToPoint, peer: int, buf: np.ndarray, step: int) -> None:
    peers.wait(peers.isend(peer, buf, step))


def recv(peers: PointToPoint, peer: int, buf: np.ndarray, step: int) -> None:
    peers.wait(peers.irecv(peer, buf, step))


def exchange(
    peers: PointToPoint, send_to: int, send_buf: np.ndarray, recv_from: int, recv_buf: np.ndarray, step: int
) -> None:
    """Send one buffer and receive another at the same time (never deadlocks on size)."""
    incoming = peers.irecv(recv_from, recv_buf, step)
    outgoing = peers.isend(send_to, send_buf, step)
    peers.wait(incoming, outgoing)
