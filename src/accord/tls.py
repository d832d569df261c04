"""TLS for accord's TCP connections (stdlib ``ssl``), when the user gives certificate files.

Owns: the settings (``ACCORD_TLS_CERT``, ``ACCORD_TLS_KEY``, ``ACCORD_TLS_CA``: all three, or
none), the SSL contexts (mutual TLS: each side presents its certificate and checks the other's
against the CA; no host-name check, as ranks connect by address), wrapping a connected socket
(blocking handshake, or non-blocking for the store's selector loop), and ``stream_of``: the
adapter through which the frame reader and writer and the store server use a TLS socket (SSL's
want-read / want-write become BlockingIOError, its end of stream 0 bytes, ``sendmsg`` a
``send`` of the first buffer). Must not know frames or the store's protocol.

Shared-memory rings between ranks of one host do not go through TLS (the socket that
carries the handshake then only tells the peer's death).
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from typing import Any

from .config import SETTINGS, Setting
from .errors import AuthenticationError

CERT = Setting(
    "ACCORD_TLS_CERT",
    None,
    "TLS: this process's certificate (PEM). With "
    "ACCORD_TLS_KEY and ACCORD_TLS_CA, every store and rank-to-rank TCP connection "
    "is TLS, both sides presenting a certificate signed by the CA.",
)
KEY = Setting("ACCORD_TLS_KEY", None, "TLS: the private key of ACCORD_TLS_CERT (PEM).")
CA = Setting(
    "ACCORD_TLS_CA",
    None,
    "TLS: the CA certificate(s) (PEM) that sign the job's "
    "certificates; a peer whose certificate it did not sign is refused.",
)
for _setting in (CERT, KEY, CA):
    SETTINGS[_setting.name] = _setting

_cache_lock = threading.Lock()
_cache: dict[tuple[Any, ...], tuple[ssl.SSLContext, ssl.SSLContext]] = {}


def _files() -> tuple[str, str, str] | None:
    given = [CERT.raw(), KEY.raw(), CA.raw()]
    if not any(given):
        return None
    if not all(given):
        missing = [s.name for s, v in zip((CERT, KEY, CA), given) if not v]
        raise AuthenticationError(
            f"TLS needs ACCORD_TLS_CERT, ACCORD_TLS_KEY and ACCORD_TLS_CA "
            f"together; {', '.join(missing)} unset"
        )
    return given[0], given[1], given[2]  # type: ignore[return-value]


def enabled() -> bool:
    return _files() is not None


def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(client context, server context) for the files set now (made once per set of files)."""
    files = _files()
    assert files is not None
    key = tuple((path, os.stat(path).st_mtime_ns) if os.path.exists(path) else (path, None) for path in files)
    with _cache_lock:
        if key not in _cache:
            _cache[key] = (
                _context(ssl.PROTOCOL_TLS_CLIENT, *files),
                _context(ssl.PROTOCOL_TLS_SERVER, *files),
            )
        return _cache[key]


def _context(protocol: int, cert: str, key: str, ca: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # ranks and stores are reached by address: the CA is the check
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(ca)
    except (OSError, ssl.SSLError) as exc:
        raise AuthenticationError(
            f"TLS: cannot load ACCORD_TLS_CERT={cert}, ACCORD_TLS_KEY={key} or ACCORD_TLS_CA={ca}: {exc}"
        ) from exc
    return ctx


def client_wrap(sock: socket.socket, where: str) -> ssl.SSLSocket:
    """TLS over a connected socket, as the connecting side (blocking handshake, within the
    socket's timeout); AuthenticationError if the peer is no TLS peer of this job."""
    try:
        return contexts()[0].wrap_socket(sock)
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        raise AuthenticationError(
            f"TLS handshake with {where} failed ({exc}): it speaks no TLS, "
            f"or its certificate is not signed by ACCORD_TLS_CA"
        ) from exc


def server_wrap(
    sock: socket.socket, handshake: bool = True, context: ssl.SSLContext | None = None
) -> ssl.SSLSocket:
    """TLS over an accepted socket (with ``context``, default the files' server context);
    with ``handshake`` False the caller drives it (``handshake_step``). ssl.SSLError /
    OSError if the handshake fails."""
    context = context or contexts()[1]
    return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=handshake)


def handshake_step(sock: ssl.SSLSocket) -> bool:
    """Advance a non-blocking server handshake: True when done, False when it waits for the
    peer (ssl.SSLError when it failed)."""
    try:
        sock.do_handshake()
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return False
    return True


class TlsStream:
    """A non-blocking TLS socket seen as the byte stream the frame code expects."""

    __slots__ = ("sock",)

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock

    def send(self, buf: Any) -> int:
        try:
            return self.sock.send(buf)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            raise BlockingIOError() from None

    def sendmsg(self, buffers: list[memoryview]) -> int:
        """The buffers one after another (TLS has no gather write); stops at the first that
        the socket does not take whole. A retry after would-block starts where this stopped,
        with the same bytes, as OpenSSL requires."""
        total = 0
        for buf in buffers:
            if not len(buf):
                continue
            try:
                sent = self.sock.send(buf)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                if total:
                    return total
                raise BlockingIOError() from None
            total += sent
            if sent < len(buf):
                break
        return total

    def recv_into(self, target: Any) -> int:
        """As much as is there now, up to ``target``'s size: TLS returns one record (16 KiB)
        per read, and the frame reader takes a short read for 'nothing more for now'."""
        view = memoryview(target).cast("B")
        total = 0
        while total < len(view):
            try:
                n = self.sock.recv_into(view[total:])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                if total:
                    return total
                raise BlockingIOError() from None
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return total
            if n == 0:
                return total
            total += n
        return total

    def recv(self, n: int) -> bytes:
        try:
            return self.sock.recv(n)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError() from None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""

    def pending(self) -> int:
        return self.sock.pending()


def stream_of(sock: socket.socket) -> Any:
    """What to read and write ``sock`` through: itself, or a TlsStream."""
    return TlsStream(sock) if isinstance(sock, ssl.SSLSocket) else sock
