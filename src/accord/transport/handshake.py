"""The handshake that opens a rank-to-rank TCP link: who connected, and do they hold the secret.

Owns: the HELLO frame's payload and, when the job has a secret (``auth.job_secret()``), the
challenge–response that follows it (both ends prove the secret, bound to this job's token and
to the two ranks, so a proof can be neither replayed nor reflected nor used to claim another
rank). Must not know sockets beyond reading and writing bytes with a timeout, or what a mesh
does with the link.

Frames (all ``FrameKind.HELLO``; see docs/wire-protocols.md)::

    connector -> acceptor   HELLO: u32 rank, u32 world size, u32 flags (bit 0: authenticates),
                            [32-byte nonce, if bit 0], job token
    acceptor  -> connector  its nonce (32 bytes)                    } only when both
    connector -> acceptor   the connector's proof (32)              } have a secret
    acceptor  -> connector  the acceptor's proof (32), or it closes }
"""

from __future__ import annotations

import socket
import struct

from .. import auth
from ..errors import AuthenticationError, ProtocolError
from .wire import HEADER_SIZE, NO_FINGERPRINT, FrameKind, pack_header, unpack_header

_HELLO = struct.Struct("<III")  # rank, world size, flags; then [nonce], then the job token
_AUTHENTICATES = 1
LABEL = b"accord-link-v1"
_MAX_HELLO = 4096


def _frame(payload: bytes) -> bytes:
    return pack_header(FrameKind.HELLO, 0, 0, 0, 0, NO_FINGERPRINT, len(payload)) + payload


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ProtocolError("connection closed during the handshake")
        data += chunk
    return bytes(data)


def _read_frame(sock: socket.socket, exact: int | None = None) -> bytes:
    header = unpack_header(_read_exact(sock, HEADER_SIZE))
    if header.kind != FrameKind.HELLO or header.nbytes > _MAX_HELLO:
        raise ProtocolError("a handshake frame was expected on a new link")
    if exact is not None and header.nbytes != exact:
        raise ProtocolError(f"a handshake frame of {header.nbytes} bytes, not {exact}")
    return _read_exact(sock, header.nbytes)


def _context(token: bytes, connector: int, acceptor: int, size: int) -> bytes:
    return struct.pack("<III", connector, acceptor, size) + token


def connector_side(
    sock: socket.socket, rank: int, peer: int, size: int, token: bytes, secret: bytes | None, where: str
) -> None:
    """Open a link to ``peer`` (a lower rank) on a connected socket; AuthenticationError if
    the two do not share the secret (``where``: the peer's address, for messages)."""
    if secret is None:
        sock.sendall(_frame(_HELLO.pack(rank, size, 0) + token))
        return
    mine = auth.nonce()
    sock.sendall(_frame(_HELLO.pack(rank, size, _AUTHENTICATES) + mine + token))
    context = _context(token, rank, peer, size)
    try:
        theirs = _read_frame(sock, auth.NONCE_BYTES)
        sock.sendall(_frame(auth.proof(secret, LABEL, auth.CONNECTOR, theirs, mine, context)))
        answer = _read_frame(sock, auth.PROOF_BYTES)
    except ProtocolError as exc:
        raise AuthenticationError(
            f"rank {rank}: rank {peer} at {where} refused the link during authentication "
            f"({exc}): its secret differs, or it has none (set the same ACCORD_SECRET on "
            f"every rank)"
        ) from None
    if not auth.check(secret, answer, LABEL, auth.ACCEPTOR, mine, theirs, context):
        raise AuthenticationError(
            f"rank {rank}: the process at {where} could not prove the "
            f"job's secret: it is not rank {peer} of this job"
        )


def acceptor_side(sock: socket.socket, rank: int, size: int, token: bytes, secret: bytes | None) -> int:
    """Accept a link on ``sock``; returns the connector's rank. ProtocolError (another job,
    a bad frame) or AuthenticationError (no or another secret): the caller refuses the link
    and goes on accepting."""
    payload = _read_frame(sock)
    if len(payload) < _HELLO.size:
        raise ProtocolError("a HELLO too short to name a rank")
    peer, their_size, flags = _HELLO.unpack_from(payload)
    authenticates = bool(flags & _AUTHENTICATES)
    nonce_end = _HELLO.size + (auth.NONCE_BYTES if authenticates else 0)
    if payload[nonce_end:] != token or their_size != size:
        raise ProtocolError(f"a process of another job (or an older run) connected as rank {peer}")
    if not 0 <= peer < size:
        raise ProtocolError(f"a HELLO claiming rank {peer} of {size}")
    if secret is None:
        if authenticates:
            raise AuthenticationError(
                f"a process claiming rank {peer} asked to authenticate, "
                f"but this rank has no secret (ACCORD_SECRET unset here)"
            )
        return int(peer)
    if not authenticates:
        raise AuthenticationError(
            f"a process claiming rank {peer} did not authenticate: it lacks the job's secret (ACCORD_SECRET)"
        )
    theirs, mine = payload[_HELLO.size : nonce_end], auth.nonce()
    context = _context(token, peer, rank, size)
    sock.sendall(_frame(mine))
    if not auth.check(
        secret, _read_frame(sock, auth.PROOF_BYTES), LABEL, auth.CONNECTOR, mine, theirs, context
    ):
        raise AuthenticationError(f"a process claiming rank {peer} proved another secret than this job's")
    sock.sendall(_frame(auth.proof(secret, LABEL, auth.ACCEPTOR, theirs, mine, context)))
    return int(peer)
