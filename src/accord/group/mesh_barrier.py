"""A barrier of every rank of a mesh, outside any process group (the end of init).

Owns: ``mesh_barrier`` — the dissemination barrier over a channel of its own (a reserved
group id, opened and closed around the one call), so that no group's call numbers, flight
recorder or statistics see it. init_process_group ends with it: every store read of init
comes before, so no rank leaves init, finishes its work and exits (taking the store it may
host along) while another still reads the store for its own init. A store barrier would not
do: the last reply of the store's host may be lost when it exits at once, whereas frames sent
before a rank exits are still delivered (GOODBYE comes after them). Must not know about the
store, env variables or the default world.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collectives.barrier import dissemination
from ..collectives.registry import COLLECTIVES
from ..config import Tunables
from ..timeouts import Deadline
from ..transport.mesh import Mesh
from ..transport.wire import Fingerprint, FrameKind

#: The channel's group id: outside the range new_group draws from in practice (it hashes).
INIT_BARRIER_GROUP = 0xFFFFFFFF
_FP = Fingerprint(COLLECTIVES["barrier"], 0, 0, 0, -1)


class _MeshPeers:
    """The ``Peers`` of the one barrier call: mesh ranks are its ranks."""

    def __init__(self, mesh: Mesh, channel: Any, deadline: Deadline, what: str) -> None:
        self.rank, self.size, self.tunables = mesh.rank, mesh.size, Tunables.from_env()
        self._channel, self._deadline, self._what = channel, deadline, what

    def __str__(self) -> str:
        return f"{self._what} on rank {self.rank}"

    def isend(self, peer: int, buf: np.ndarray, step: int) -> Any:
        return self._channel.isend(peer, FrameKind.COLL, 1, step, 0, _FP, buf.view(np.uint8).data, self)

    def irecv(self, peer: int, buf: np.ndarray, step: int) -> Any:
        return self._channel.irecv(peer, FrameKind.COLL, 1, step, 0, _FP, buf.view(np.uint8).data, self)

    def wait(self, *handles: Any) -> None:
        self._channel.wait(handles, self._deadline, self)


def mesh_barrier(mesh: Mesh, deadline: Deadline, what: str = "init_process_group's barrier") -> None:
    """Return once every rank of ``mesh`` has called it (raises PeerError / DistTimeoutError
    naming the rank that is missing)."""
    if mesh.size < 2:
        return
    channel = mesh.open_channel(INIT_BARRIER_GROUP, range(mesh.size))
    try:
        peers = _MeshPeers(mesh, channel, deadline, what)
        channel.begin(1, _FP, peers)
        dissemination(peers)
        channel.end(1)
    finally:
        mesh.close_channel(channel, ended=1, tell_peers=False)  # a channel of one call
