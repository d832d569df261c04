"""The TCPStore servers of this process: which master gets which server.

Owns: ``acquire`` and ``release``, the masters' way to a server — a new one, the one another
master of this process shares on the port (``multi_tenant``), or a retiring one revived: a
program that destroyed its group and starts over on the same port (init again) gets the old
server back, serving on with its keys and its clients, since a peer that started over sooner
may already be connected to it. A retiring server that cannot be revived (its grace just ran
out, another host or secret) is stopped and the new server takes the port. Must not know
what a server does with its bytes (``tcp_server``) or the client (``tcp_store``).
"""

from __future__ import annotations

import threading

from .. import auth
from . import tcp_server

# Why module-level state: torch promises that every ``TCPStore(is_master=True,
# multi_tenant=True)`` of one process on one port shares one server. Such objects are created
# independently (often by different libraries), so the process is the only place they can
# meet. Port → [server, number of TCPStores using it]; guarded by the lock; an entry goes
# away when its last TCPStore closes.
_SHARED_SERVERS: dict[int, list] = {}
_SHARED_LOCK = threading.Lock()


def acquire(
    port: int, multi_tenant: bool, listen_fd: int | None, host: str | None = None
) -> tcp_server.TCPStoreServer:
    """A server for a master TCPStore: a new one, or with ``multi_tenant`` the one this
    process already runs on ``port``. ``host``: the address clients are told (a loopback
    one keeps the server on loopback)."""
    revived = None
    if port and listen_fd is None:
        for old in list(tcp_server.LIVE_SERVERS):
            if old.port == port and old.retiring:
                # The program started over on this port (destroy, then init again): the
                # retiring server serves again, keeping its keys and its clients — a peer
                # that started over sooner may already be connected to it, and closing the
                # server under it would fail its rendezvous. One that cannot be revived
                # (its grace just ran out, or another host or secret) makes way.
                if revived is None and old.revive(host, auth.job_secret()):
                    revived = old
                else:
                    old.close()
    if not multi_tenant:
        return revived or tcp_server.TCPStoreServer(port, listen_fd=listen_fd, host=host)
    with _SHARED_LOCK:
        entry = _SHARED_SERVERS.get(port) if port and listen_fd is None else None
        if entry is None:
            server = revived or tcp_server.TCPStoreServer(port, listen_fd=listen_fd, host=host)
            entry = _SHARED_SERVERS[server.port] = [server, 0]
        entry[1] += 1
        shared: tcp_server.TCPStoreServer = entry[0]
        return shared


def release(server: tcp_server.TCPStoreServer) -> None:
    """A master TCPStore is done with ``server``: retire it once no other master shares it."""
    with _SHARED_LOCK:
        entry = _SHARED_SERVERS.get(server.port)
        if entry is not None and entry[0] is server:
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _SHARED_SERVERS[server.port]
    server.retire(tcp_server.exit_grace())
