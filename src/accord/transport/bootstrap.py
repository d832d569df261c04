"""Building a TCP full mesh through a Store: publish, gather, connect, handshake.

Owns: the listening socket, the address record each rank publishes, the store wait that names
the ranks that never published, refusing (with a warning) an accepted connection whose
handshake fails (the handshake itself is ``handshake``'s), and socket options (buffers,
TCP_NODELAY, and the keepalive probes of ``liveness`` that ACCORD_PEER_LOST_TIMEOUT sizes).
Must not know about algorithms or process groups: it returns a TcpMesh.

Rank r connects to every lower rank and accepts every higher one; the kernel completes
connections into the listen backlog, so the two phases cannot deadlock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from .. import auth, config, tls
from ..errors import (
    AuthenticationError,
    DistNetworkError,
    DistStoreError,
    DistTimeoutError,
    ProtocolError,
    StoreTimeoutError,
)
from ..store.base import Store
from ..timeouts import Deadline, format_seconds
from .addresses import choose_address, host_identity
from .handshake import acceptor_side, connector_side
from .liveness import keep_alive
from .shm_ring import RingReader, RingWriter, map_rings
from .tcp import TcpMesh

log = logging.getLogger("accord")
#: How long an accepted connection may take over its handshake before it is dropped (a
#: silent stranger must not hold up the ranks still to come).
_HANDSHAKE_S = 5.0


@dataclass(frozen=True)
class PeerRecord:
    """What each rank publishes before links are built."""

    rank: int
    host: str
    port: int
    host_id: str
    pid: int

    def encode(self) -> bytes:
        return json.dumps(self.__dict__).encode()

    @classmethod
    def decode(cls, data: bytes) -> PeerRecord:
        return cls(**json.loads(data))


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _listen(address: str, backlog: int) -> socket.socket:
    listener = socket.socket(_family(address), socket.SOCK_STREAM)
    set_buffers(listener)  # accepted sockets inherit them; must precede the handshake
    try:
        listener.bind((address, 0))
    except OSError as exc:
        listener.close()
        raise DistNetworkError(
            f"cannot listen on {address}: {exc}. Set ACCORD_SOCKET_IFNAME "
            f"to an interface with a reachable address"
        ) from exc
    listener.listen(max(backlog, 128))
    return listener


def gather_records(
    store: Store, prefix: str, me: PeerRecord, size: int, deadline: Deadline
) -> list[PeerRecord]:
    """Publish this rank's record, then wait for everyone's; a timeout names who is missing.

    A rank that gives up tells the others why (``_abandon``) before it raises, because the
    store may go down with it (rank 0 hosts the TCPStore, and it is the first to give up: the
    others cannot start their clocks before its store is up). So every waiting rank fails at
    once with the same verdict, instead of a lost store connection.
    """
    store.set(f"{prefix}/peer/{me.rank}", me.encode())
    keys = [f"{prefix}/peer/{r}" for r in range(size)]
    try:
        store.wait(keys, timedelta(seconds=_remaining(deadline)))
    except StoreTimeoutError:
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        if store.check([f"{prefix}/{_ABANDONED}"]):  # after `missing`: see _abandon
            raise _abandoned_error(store, prefix, me.rank) from None
        verdict = (
            f"ranks {missing} of {size} did not join within "
            f"{format_seconds(deadline.budget)}. Did they start, with the same rendezvous "
            f"settings (MASTER_ADDR/MASTER_PORT, world size)?"
        )
        _abandon(store, prefix, me.rank, keys, missing, verdict)
        raise DistTimeoutError(f"rank {me.rank}: {verdict}") from None
    values = store.multi_get(keys)
    if not all(values) or store.check([f"{prefix}/{_ABANDONED}"]):
        raise _abandoned_error(store, prefix, me.rank)
    return [PeerRecord.decode(data) for data in values]


_ABANDONED = "abandoned"
#: How long a rank that gives up waits for the ranks that did join to read its verdict.
_ABANDON_GRACE_S = 2.0


def _abandon(store: Store, prefix: str, rank: int, keys: list[str], missing: list[int], verdict: str) -> None:
    """Publish the verdict, release the ranks still waiting (an empty record for each missing
    rank), and give them a moment to read it. Best effort: the store may already be gone.

    The verdict goes first: a rank whose own wait ends at this moment may count an empty
    record as joined, but then it finds the verdict and reports that instead."""
    try:
        store.set(f"{prefix}/{_ABANDONED}", f"rank {rank} gave up waiting: {verdict}")
        for r in missing:
            store.set(keys[r], b"")
        store.set(f"{prefix}/left/{rank}", b"1")
        joined = [r for r in range(len(keys)) if r not in missing and r != rank]
        store.wait([f"{prefix}/left/{r}" for r in joined], timedelta(seconds=_ABANDON_GRACE_S))
    except DistStoreError:
        pass


def _abandoned_error(store: Store, prefix: str, rank: int) -> DistTimeoutError:
    """The error of a rank that finds the rendezvous abandoned by another (who said why)."""
    try:
        verdict = store.get(f"{prefix}/{_ABANDONED}").decode("utf-8", "replace")
        store.set(f"{prefix}/left/{rank}", b"1")
    except DistStoreError:
        verdict = "another rank gave up waiting for the ranks that did not join"
    return DistTimeoutError(f"rank {rank}: {verdict}")


def _remaining(deadline: Deadline) -> float:
    return max(deadline.remaining(), 0.001)


def set_buffers(sock: socket.socket) -> None:
    """The socket buffer sizes of accord's TCP links (``ACCORD_TCP_BUFFER_BYTES``)."""
    size = config.tcp_buffer_bytes()
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, size)
        except OSError:
            pass


def _connect(record: PeerRecord, me: int, deadline: Deadline) -> socket.socket:
    sock = socket.socket(_family(record.host), socket.SOCK_STREAM)
    set_buffers(sock)
    sock.settimeout(_remaining(deadline))
    try:
        sock.connect((record.host, record.port))
    except OSError as exc:
        sock.close()
        raise DistNetworkError(
            f"rank {me} cannot connect to rank {record.rank} at {record.host}:{record.port} "
            f"({exc}). Is the address reachable from here? Set ACCORD_SOCKET_IFNAME to pick "
            f"the interface each rank publishes"
        ) from exc
    return sock


def _accept_link(
    sock: socket.socket,
    stranger: object,
    rank: int,
    size: int,
    token: bytes,
    secret: bytes | None,
    deadline: Deadline,
    sockets: dict[int, socket.socket],
) -> tuple[socket.socket, int | None]:
    """(the link's socket, the rank of the accepted connection), or rank None (closed, with a
    warning) if it is refused. With TLS, the socket is the TLS one."""
    sock.settimeout(min(_remaining(deadline), _HANDSHAKE_S))
    try:
        if tls.enabled():
            sock = tls.server_wrap(sock)
        peer = acceptor_side(sock, rank, size, token, secret)
        if peer <= rank or peer in sockets:
            raise ProtocolError(f"a second connection claiming rank {peer}")
    except (ProtocolError, AuthenticationError, OSError) as exc:
        sock.close()
        why = "it did not finish the handshake in time" if isinstance(exc, socket.timeout) else exc
        log.warning("rank %d: refused a connection from %s: %s", rank, _where(stranger), why)
        return sock, None
    sock.settimeout(_remaining(deadline))
    return sock, peer


def _where(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _rings(
    store: Store, prefix: str, rank: int, records: list[PeerRecord], deadline: Deadline
) -> dict[int, tuple[RingWriter, RingReader]]:
    """Shared-memory rings to the ranks on this host, unless ACCORD_TRANSPORT=tcp."""
    if config.transport() == "tcp":
        return {}
    local = [r.rank for r in records if r.host_id == records[rank].host_id]
    token = f"{records[0].pid:x}{records[0].port:x}"
    return map_rings(
        store, prefix, rank, local, [r.pid for r in records], token, config.shm_ring_bytes(), deadline
    )


def connect_mesh(store: Store, prefix: str, rank: int, size: int, deadline: Deadline) -> TcpMesh:
    """Build the TCP full mesh for ``size`` ranks whose records go under ``prefix``.

    A connection that fails its handshake (another job, no or another secret, garbage,
    silence) is refused with a warning naming its address, and the ranks still to come are
    waited for as before: a stranger cannot break the job's start."""
    secret = auth.job_secret()
    lost_after = config.peer_lost_timeout()
    # A world of one rank connects to nobody: its listener only gives its record a port, so it
    # listens on loopback (a membership change that adds ranks makes a new mesh, and listens
    # where they can reach it then).
    address = choose_address(store.local_address()) if size > 1 else "127.0.0.1"
    listener = _listen(address, size)
    sockets: dict[int, socket.socket] = {}
    token = prefix.encode()
    try:
        me = PeerRecord(rank, address, listener.getsockname()[1], host_identity(), os.getpid())
        records = gather_records(store, prefix, me, size, deadline)
        if secret is None:  # (once the records tell whether the whole job is on this host)
            one_host = all(r.host_id == me.host_id for r in records)
            auth.warn_if_exposed(address, "accord's rank-to-rank listener", size if one_host else None)
        for peer in range(rank):
            sock = _connect(records[peer], rank, deadline)
            sockets[peer] = sock
            where = f"{records[peer].host}:{records[peer].port}"
            if tls.enabled():
                sock = sockets[peer] = tls.client_wrap(sock, f"rank {peer} at {where}")
            connector_side(sock, rank, peer, size, token, secret, where)
        while len(sockets) < size - 1:
            listener.settimeout(_remaining(deadline))
            try:
                sock, stranger = listener.accept()
            except TimeoutError:
                missing = sorted(set(range(rank + 1, size)) - set(sockets))
                raise DistTimeoutError(
                    f"rank {rank}: ranks {missing} never connected within {format_seconds(deadline.budget)}"
                ) from None
            sock, accepted = _accept_link(sock, stranger, rank, size, token, secret, deadline, sockets)
            if accepted is not None:
                sockets[accepted] = sock
        for sock in sockets.values():
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keep_alive(sock, lost_after)
        return TcpMesh(
            rank,
            size,
            sockets,
            records,
            _rings(store, prefix, rank, records, deadline),
            spread=config.spread(),
            lost_after=lost_after,
        )
    except BaseException:
        for sock in sockets.values():
            sock.close()
        raise
    finally:
        listener.close()
