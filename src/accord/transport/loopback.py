"""An in-process transport: ranks are threads of one process, frames are handed over directly.

Owns: LoopbackFabric (the meshes of one simulated job) and LoopbackMesh. It has the full Mesh
contract — matching, parking, fingerprints, peer loss, POISON — which is why most tests run on
it. ``LoopbackFabric.kill(rank)`` simulates a peer dying. Must not know about algorithms.
"""

from __future__ import annotations

import os
import threading

from ..errors import PeerError
from .matching import SendRequest
from .mesh import Mesh
from .wire import FrameKind, unpack_header


class LoopbackFabric:
    """The meshes of one simulated job, indexed by rank."""

    def __init__(self, size: int, shared_memory: bool = False, hosts: list[str] | None = None) -> None:
        self.size = size
        self.shared_memory = shared_memory  # let groups use shared memory between the threads
        self.hosts = hosts  # a host name per rank, to simulate several hosts (default: one)
        self.meshes: list[LoopbackMesh | None] = [None] * size
        self._lock = threading.Lock()

    def mesh(self, rank: int) -> LoopbackMesh:
        with self._lock:
            if self.meshes[rank] is None:
                self.meshes[rank] = LoopbackMesh(self, rank, self.size)
            mesh = self.meshes[rank]
        assert mesh is not None
        return mesh

    def peer(self, rank: int) -> LoopbackMesh:
        mesh = self.meshes[rank]
        if mesh is None:
            return self.mesh(rank)
        return mesh

    def kill(self, rank: int) -> None:
        """Make ``rank`` vanish as a killed process would: its peers see it die."""
        mesh = self.meshes[rank]
        if mesh is not None:
            mesh.begin_close()
        for other in self.meshes:
            if other is not None and other.rank != rank:
                other.peer_lost(rank, PeerError(f"rank {rank} died (killed in a test)", peer=rank))


class LoopbackMesh(Mesh):
    name = "loopback"
    needs_driver = False

    def __init__(self, fabric: LoopbackFabric, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self.fabric = fabric
        self.host_ids = list(fabric.hosts) if fabric.hosts else [f"loopback-{id(fabric):x}"] * size
        self.pids = [os.getpid()] * size
        self.job_token = f"lb{id(fabric):x}"
        self.threaded = True
        self.shm_allowed = fabric.shared_memory

    def _transmit(self, req: SendRequest) -> None:
        if req.dst == self.rank:
            raise ValueError("a rank cannot send to itself")
        peer = self.fabric.peer(req.dst)
        header = unpack_header(req.header)
        if peer.closed:
            self.complete_send(req)  # like bytes into a socket whose reader is gone
            return
        if header.kind == FrameKind.POISON:
            peer.poison_arrived(self.rank, header.group, bytes(req.payload).decode("utf-8", "replace"))
        elif header.kind == FrameKind.GOODBYE:
            peer.peer_lost(self.rank, None, bytes(req.payload))
        elif header.kind == FrameKind.LEAVE:
            peer.group_left(self.rank, header.group, bytes(req.payload))
        else:
            dest, token = peer.frame_arrived(self.rank, header)
            if dest is not None:
                dest[:] = req.payload
                peer.payload_complete(self.rank, token)
        self.complete_send(req)

    def _drive(self, timeout: float) -> None:
        raise AssertionError("loopback senders deliver directly; nothing to drive")

    def _wake(self) -> None:
        with self.lock:
            self.cond.notify_all()

    def close(self) -> None:
        if not self.begin_close():
            return
        progress = self.goodbye_payload()
        for peer in self.fabric.meshes:
            if peer is not None and peer.rank != self.rank:
                peer.peer_lost(self.rank, None, progress)
