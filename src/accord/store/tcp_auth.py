"""Authentication on a TCPStore connection: accord's extension in front of torch's protocol.

Owns: the bytes of the store's challenge–response (below), the server's per-connection gate
(sans-IO: fed what the socket read, it says what to send and whether the connection may go on
to torch's VALIDATE) and the client's side (blocking, over the client's read/send). The proofs
are ``auth``'s. Must not know sockets, selectors or what the store does.

When the job has a secret (``auth.job_secret()``), a client starts with, before VALIDATE::

    client -> server   AUTH (u8 0xA1), version (u8 1), client nonce (32 bytes)
    server -> client   server nonce (32)
    client -> server   client proof (32)
    server -> client   u8 1 and the server's proof (32) -- or u8 0, and it closes
    ... then torch's protocol, unchanged (VALIDATE, PING, ...)

0xA1 is no torch command, so a server without a secret (torch's, or accord's with none)
closes the connection, and the client says the store has no secret. A server with one
refuses a client that starts with anything else (torch's clients, accord's without the
secret), unless the server's ``admit`` policy lets that client in (accordrun admits its own
workers' processes, for torch programs), and logs why.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from .. import auth
from ..errors import AuthenticationError

AUTH = 0xA1
VERSION = 1
LABEL = b"accord-tcpstore-v1"
ACCEPTED, REFUSED = 1, 0
_HELLO_BYTES = 2 + auth.NONCE_BYTES


class Verdict(enum.Enum):
    PENDING = "pending"  # more bytes needed
    OPEN = "open"  # authenticated (or admitted): hand the rest to torch's protocol
    REFUSED = "refused"  # send the reply, then close; ``why`` says why


class ServerGate:
    """One connection's way through authentication on a server with ``secret`` (or None:
    then it only explains a client that asks to authenticate)."""

    def __init__(self, secret: bytes | None, admit: Callable[[], bool] | None = None) -> None:
        self.secret, self.admit = secret, admit
        self.buffer = bytearray()
        self.client_nonce = self.server_nonce = b""
        self.why = ""

    def feed(self, data: bytes) -> tuple[Verdict, bytes, bytes]:
        """(verdict, bytes to send, bytes left over for torch's protocol once OPEN)."""
        self.buffer += data
        if not self.server_nonce:
            return self._hello()
        if len(self.buffer) < auth.PROOF_BYTES:
            return Verdict.PENDING, b"", b""
        received = bytes(self.buffer[: auth.PROOF_BYTES])
        rest = bytes(self.buffer[auth.PROOF_BYTES :])
        assert self.secret is not None
        if not auth.check(self.secret, received, LABEL, auth.CONNECTOR, self.server_nonce, self.client_nonce):
            self.why = (
                "refused: its proof does not match this store's secret (the client has another ACCORD_SECRET)"
            )
            return Verdict.REFUSED, bytes([REFUSED]), b""
        mine = auth.proof(self.secret, LABEL, auth.ACCEPTOR, self.client_nonce, self.server_nonce)
        return Verdict.OPEN, bytes([ACCEPTED]) + mine, rest

    def _hello(self) -> tuple[Verdict, bytes, bytes]:
        if not self.buffer:
            return Verdict.PENDING, b"", b""
        if self.buffer[0] != AUTH:
            if self.secret is None or (self.admit is not None and self.admit()):
                return Verdict.OPEN, b"", bytes(self.buffer)
            self.why = (
                "refused: it did not authenticate (torch's client, or accord without "
                "the job's ACCORD_SECRET); this store requires the job's secret"
            )
            return Verdict.REFUSED, b"", b""
        if self.secret is None:
            self.why = (
                "refused: it asked to authenticate, but this store has no secret (set "
                "the same ACCORD_SECRET where the store runs)"
            )
            return Verdict.REFUSED, b"", b""
        if len(self.buffer) < _HELLO_BYTES:
            return Verdict.PENDING, b"", b""
        if self.buffer[1] != VERSION:
            self.why = f"refused: authentication version {self.buffer[1]} (this accord speaks {VERSION})"
            return Verdict.REFUSED, b"", b""
        self.client_nonce = bytes(self.buffer[2:_HELLO_BYTES])
        del self.buffer[:_HELLO_BYTES]
        self.server_nonce = auth.nonce()
        if self.buffer:  # a client does not send its proof before it has our nonce
            self.why = "refused: it sent its proof before the challenge"
            return Verdict.REFUSED, b"", b""
        return Verdict.PENDING, self.server_nonce, b""


def authenticate_client(
    secret: bytes, send: Callable[[bytes], None], read: Callable[[int], bytes], where: str
) -> None:
    """The client's side, before VALIDATE. ``read`` raises what the connection raises when it
    closes; AuthenticationError when the store refuses or cannot prove the secret."""
    mine = auth.nonce()
    send(bytes([AUTH, VERSION]) + mine)
    theirs = read(auth.NONCE_BYTES)
    send(auth.proof(secret, LABEL, auth.CONNECTOR, theirs, mine))
    if read(1)[0] != ACCEPTED:
        raise AuthenticationError(
            f"{where} refused this process: its secret differs from the store's (check "
            f"ACCORD_SECRET / ACCORD_SECRET_FILE on both sides)"
        )
    if not auth.check(secret, read(auth.PROOF_BYTES), LABEL, auth.ACCEPTOR, mine, theirs):
        raise AuthenticationError(
            f"{where} could not prove it holds the job's secret: it is not this job's store"
        )
