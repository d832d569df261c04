"""One client connection to a TCPStore server speaking torch's protocol (accord's or torch's).

Owns: connecting (with retries until the timeout), the handshake (VALIDATE, then PING whose
nonce the server must echo), sending requests, reading replies of known shapes with a deadline,
waiting with a client-side timeout (WAIT or BARRIER, then CANCEL_WAIT when the time is up), and
telling, when the server closes the connection, whether it went away or refused the request
(then the connection is re-opened), and what such a refusal likely means (``refusal``);
a user's key as the client sends it (``wire_key``). Which bytes make a request is ``tcp_protocol``'s; what
the operations mean is ``tcp_store``'s. Must not know ranks or the Store API.

Not thread-safe: the caller holds a lock around each exchange.
"""

from __future__ import annotations

import os
import socket
import time

from .. import auth, tls
from ..errors import AuthenticationError, DistStoreError, ProtocolError, StoreTimeoutError
from ..timeouts import Deadline, format_seconds
from . import tcp_protocol as p
from .base import check_key
from .local_clients import forget_local_client, note_local_client
from .tcp_auth import authenticate_client

_RECV_BYTES = 1 << 16
_FIRST_RETRY_S, _MAX_RETRY_S = 0.01, 0.5
#: Handshakes the server may close before the client concludes it does not speak torch's
#: protocol (a loaded server may also drop one now and then).
_HANDSHAKE_TRIES = 3
#: How long a client waits for the server to answer CANCEL_WAIT, and to re-open a connection
#: the server closed (to tell a refused request from a server that went away).
_CANCEL_S, _PROBE_S = 10.0, 2.0
#: How long a client with a secret waits for the store's answer to its AUTH hello.
_AUTH_ANSWER_S = 5.0


def open_socket(host: str, port: int, timeout: float) -> socket.socket:
    """One connection attempt (a seam for tests)."""
    return socket.create_connection((host, port), timeout=timeout)


class Lost(Exception):
    """The connection closed or failed mid-exchange (``args[0]``: what happened)."""


class ClientConnection:
    """A connected, validated socket to one server; reads and writes with deadlines."""

    def __init__(self, host: str, port: int, seconds: float) -> None:
        self.host, self.port = host, port
        self.where = f"TCPStore {host}:{port}"
        self.sock: socket.socket | None = None
        self._buffer = bytearray()
        self._local: tuple[str, int] | None = None
        self._open(seconds)

    # -- opening ----------------------------------------------------------------------------
    def _open(self, seconds: float) -> None:
        """Connect and validate, retrying with backoff for ``seconds``: the server may start
        later, or drop a handshake while it is swamped."""
        deadline, pause, closed_handshakes = Deadline.after(seconds), _FIRST_RETRY_S, 0
        while True:
            try:
                sock = open_socket(self.host, self.port, max(deadline.remaining(), 0.001))
            except OSError as exc:
                last: BaseException = exc
            else:
                try:
                    return self._handshake(sock, deadline)
                except Lost as exc:
                    self.close()
                    closed_handshakes, last = closed_handshakes + 1, exc
                    if closed_handshakes >= _HANDSHAKE_TRIES:
                        raise DistStoreError(self._refused_handshake(exc)) from None
            remaining = deadline.remaining()
            if remaining <= 0:
                raise StoreTimeoutError(self._unreachable(seconds, last)) from last
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _MAX_RETRY_S)

    def _handshake(self, sock: socket.socket, deadline: Deadline) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls.enabled():
            sock.settimeout(max(deadline.remaining(), 0.001))
            sock = tls.client_wrap(sock, self.where)
        self.sock, self._buffer = sock, bytearray()
        forget_local_client(self._local)
        self._local = note_local_client(sock)
        secret = auth.job_secret()
        if secret is not None:
            self._authenticate(secret, deadline)
        nonce = os.getpid() & 0xFFFFFFFF
        self.send(p.request(p.Command.VALIDATE, number=p.MAGIC) + p.request(p.Command.PING, number=nonce))
        try:
            echoed = p.read_u32(lambda n: self.read(n, deadline))
        except TimeoutError:
            self.close()
            raise StoreTimeoutError(
                f"{self.where}: the server accepted the connection but did not "
                f"answer the handshake in time. Is it a TCPStore server, and "
                f"is it alive?"
            ) from None
        if echoed != nonce:
            self.close()
            raise DistStoreError(
                f"{self.where}: the server answered the handshake with 0x{echoed:08X} instead of "
                f"echoing 0x{nonce:08X}: it does not speak torch's TCPStore protocol (an accord "
                f"before torch's protocol was adopted, or another program, listens there)."
            )

    def _authenticate(self, secret: bytes, deadline: Deadline) -> None:
        """Prove the job's secret before torch's protocol starts (see tcp_auth)."""
        # A store without a secret closes the connection (accord's) or says nothing at all
        # (torch's ignores the unknown command): do not wait for it longer than this.
        deadline = deadline.earlier(Deadline.after(_AUTH_ANSWER_S))
        try:
            authenticate_client(secret, self.send, lambda n: self.read(n, deadline), self.where)
        except (TimeoutError, Lost) as exc:
            self.close()
            raise AuthenticationError(
                f"{self.where} did not take part in authentication ({exc or 'no answer'}): it "
                f"has no secret "
                f"(torch's store, or accord's with ACCORD_SECRET unset where it runs), while "
                f"this process has one. Set the same ACCORD_SECRET on every process of the "
                f"job, or unset it on all."
            ) from None
        except AuthenticationError:
            self.close()
            raise

    def _unreachable(self, seconds: float, last: BaseException) -> str:
        reason = getattr(last, "strerror", None) or str(last) or type(last).__name__
        return (
            f"{self.where}: could not reach the store within {format_seconds(seconds)} "
            f"(last error: {reason}). Is rank 0 (or the launcher) running, and are "
            f"MASTER_ADDR/MASTER_PORT right?"
        )

    def _refused_handshake(self, exc: Lost) -> str:
        return (
            f"{self.where}: the server closed the connection during the handshake "
            f"{_HANDSHAKE_TRIES} times ({exc}): it requires the job's secret, which this "
            f"process does not have (set ACCORD_SECRET or ACCORD_SECRET_FILE as on the "
            f"store's side), or it does not speak torch's TCPStore protocol (an accord "
            f"before torch's protocol was adopted speaks its own). Its log says which."
        )

    # -- exchanging -------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        assert self.sock is not None
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise Lost(f"{type(exc).__name__}: {exc}") from exc

    def read(self, n: int, deadline: Deadline) -> bytes:
        """Exactly ``n`` bytes; socket.timeout when the deadline passes first."""
        buffer, sock = self._buffer, self.sock
        assert sock is not None
        while len(buffer) < n:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(_RECV_BYTES)
            except TimeoutError:
                raise
            except OSError as exc:
                raise Lost(f"{type(exc).__name__}: {exc}") from exc
            if not chunk:
                raise Lost("the server closed the connection")
            buffer += chunk
        data = bytes(buffer[:n])
        del buffer[:n]
        return data

    def await_stop(self, seconds: float) -> bool:
        """After a WAIT or BARRIER: True once the server says STOP_WAITING within ``seconds``;
        False if it did not (the wait was cancelled with CANCEL_WAIT)."""
        try:
            code = self._read_code(Deadline.after(seconds))
        except TimeoutError:
            self.send(p.request(p.Command.CANCEL_WAIT))
            deadline = Deadline.after(_CANCEL_S)
            code = self._read_code(deadline)
            if code == p.WAIT_CANCELED:
                return False
            # STOP_WAITING crossed our CANCEL_WAIT: the keys came just in time.
            if self._read_code(deadline) != p.WAIT_CANCELED:
                raise ProtocolError("no WAIT_CANCELED after CANCEL_WAIT") from None
            return True
        if code != p.STOP_WAITING:
            raise ProtocolError(f"reply {code} to a wait, not STOP_WAITING")
        return True

    def _read_code(self, deadline: Deadline) -> int:
        return self.read(1, deadline)[0]

    # -- recovering and closing -------------------------------------------------------------
    def reopen(self) -> bool:
        """After the server closed this connection: connect again (briefly). True if the
        server is still there, which means it refused the last request."""
        self.close()
        try:
            self._open_once(_PROBE_S)
        except (DistStoreError, OSError, Lost):
            return False
        return True

    def _open_once(self, seconds: float) -> None:
        sock = open_socket(self.host, self.port, seconds)
        try:
            self._handshake(sock, Deadline.after(seconds))
        except (TimeoutError, Lost):
            self.close()
            raise Lost("no handshake") from None

    def local_address(self) -> str:
        assert self.sock is not None
        address: str = self.sock.getsockname()[0]
        return address[len("::ffff:") :] if address.startswith("::ffff:") else address

    def interrupt(self) -> None:
        """Wake a thread blocked on this connection (it sees the connection lost)."""
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
            forget_local_client(self._local)
            self._local = None


class TimedOut:
    """What a timed-out wait returns from under the lock: the keys still missing."""

    def __init__(self, keys: list[bytes]) -> None:
        self.keys = keys


def missing(conn: ClientConnection, keys: list[bytes], deadline: Deadline) -> list[bytes]:
    """Which of ``keys`` are absent now (one CHECK each, sent together)."""
    if len(keys) < 2:
        return keys
    conn.send(b"".join(p.request(p.Command.CHECK, keys=[key]) for key in keys))
    ready = [p.read_u8(lambda n: conn.read(n, deadline)) == p.READY for _ in keys]
    return [key for key, present in zip(keys, ready) if not present]


def refusal(what: str) -> str:
    """The likely reason a server closes the connection on the request ``what``."""
    if what.startswith(("add(", "barrier(")):
        return "the key holds a value that is not an integer (or the sum leaves 64 bits)"
    if what.startswith("queue_"):
        return "the server is torch's legacy one (use_libuv=False), which has no queues"
    return "a request the server does not accept (its limits, or a protocol version it lacks)"


def wire_key(key: str) -> bytes:
    """A user's key as torch's client sends it (a "/" prefix)."""
    return b"/" + p.key_bytes(check_key(key))
