"""Where a TCPStore server listens.

Owns: making the server's listening socket: on a descriptor the caller bound
(``master_listen_fd``), on loopback when the address clients are told is a loopback one (no
other host could use it anyway, and no other host can then reach the store), else on every
interface as torch's server does (IPv6 dual-stack where the system has it); and the warning
(``auth.warn_if_exposed``) when a server without a secret listens beyond loopback. Must not
know the protocol or the clients.
"""

from __future__ import annotations

import socket

from .. import auth
from ..errors import DistStoreError

BACKLOG = 2048


def make_listener(
    port: int, listen_fd: int | None, host: str | None = None, secured: bool = False
) -> socket.socket:
    """A non-blocking listening socket on ``port``, or on ``listen_fd``."""
    if listen_fd is not None:
        try:
            sock = socket.socket(fileno=listen_fd)  # takes ownership of the descriptor
            sock.listen(BACKLOG)
        except OSError as exc:
            raise DistStoreError(
                f"TCPStore server: cannot listen on master_listen_fd={listen_fd} "
                f"({exc.strerror or exc}); pass the descriptor of a bound TCP socket."
            ) from exc
    else:
        loopback = host is not None and auth.is_loopback(host)
        try:
            sock = _bind_loopback(port, host or "") if loopback else _bind(port)
        except OSError as exc:
            raise DistStoreError(
                f"TCPStore server: could not listen on port {port} ({exc.strerror or exc}). Is "
                f"another job using it? Pick another MASTER_PORT, or pass port 0 for a free one."
            ) from exc
    if not secured:
        bound = str(sock.getsockname()[0])
        auth.warn_if_exposed("" if bound in ("0.0.0.0", "::") else bound, "The TCPStore server")
    sock.setblocking(False)
    return sock


def _bind(port: int) -> socket.socket:
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(
                ("", port), family=socket.AF_INET6, backlog=BACKLOG, dualstack_ipv6=True
            )
        except OSError as exc:
            if exc.errno == getattr(socket, "EADDRINUSE", 98):
                raise
    return socket.create_server(("", port), family=socket.AF_INET, backlog=BACKLOG)


def _bind_loopback(port: int, host: str) -> socket.socket:
    """IPv6 loopback for '::1', IPv4 loopback for the rest ('localhost' included: clients
    that resolve it to ::1 first fall back to 127.0.0.1, as torch's and accord's do)."""
    if ":" in host:
        return socket.create_server(("::1", port), family=socket.AF_INET6, backlog=BACKLOG)
    return socket.create_server(("127.0.0.1", port), family=socket.AF_INET, backlog=BACKLOG)
