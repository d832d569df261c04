"""Which TCPStore connections come from this very process.

Owns: the local addresses (host, port) of this process's open TCPStore client sockets, noted by
the client before its first byte (``note_local_client``) and forgotten when it closes; a
server of this process asks ``is_local_client`` when a connection's first request arrives (a
server retiring at close waits only for other processes' clients). Module-level state on
purpose: only here is every client socket of the process seen. Must not know the protocol.
"""

from __future__ import annotations

import socket
import threading

_LOCAL_CLIENTS: set[tuple[str, int]] = set()
_LOCK = threading.Lock()


def address(name: object) -> tuple[str, int] | None:
    """(host, port) of a socket address, IPv4-mapped IPv6 hosts written as IPv4."""
    if not isinstance(name, tuple) or len(name) < 2:
        return None
    host = str(name[0])
    return (host[len("::ffff:") :] if host.startswith("::ffff:") else host, int(name[1]))


def note_local_client(sock: socket.socket) -> tuple[str, int] | None:
    """Remember that ``sock`` is a client of this process (call it before the first byte is
    sent); returns the token to forget it."""
    try:
        mine = address(sock.getsockname())
    except OSError:
        return None
    if mine is not None:
        with _LOCK:
            _LOCAL_CLIENTS.add(mine)
    return mine


def forget_local_client(token: tuple[str, int] | None) -> None:
    if token is not None:
        with _LOCK:
            _LOCAL_CLIENTS.discard(token)


def is_local_client(peer: object) -> bool:
    """Whether the connection whose far end is ``peer`` is a client of this process."""
    return address(peer) in _LOCAL_CLIENTS
