"""Transports: links between ranks (TCP, in-process loopback; shared memory later)."""

from .matching import ANY_SOURCE, RecvRequest, SendRequest
from .mesh import Channel, Mesh, PeerState
from .wire import Fingerprint, FrameKind

__all__ = [
    "ANY_SOURCE",
    "Channel",
    "Fingerprint",
    "FrameKind",
    "Mesh",
    "PeerState",
    "RecvRequest",
    "SendRequest",
]
