"""The TCPStore server: one daemon thread moving bytes between sockets and a StoreEngine.

Owns: the listening socket, accepting, non-blocking reads and writes with ``selectors``,
per-connection decoders and output queues, dropping misbehaving clients, and shutdown. What a
request means is ``tcp_engine``'s; the bytes are ``tcp_protocol``'s (torch's TCPStore
protocol: torch's C++ clients and accord's are served alike). Must not know the client
(``tcp_store``) or ranks.

A client that breaks the protocol (garbage, an unknown command, a key or value above the
limits), fails TLS or authentication (``tcp_auth``), or sends a request the store refuses (ADD
on a value that is not an integer) is dropped, as torch's server does: a warning names the
client and the cause; no other client notices. Where it listens is ``tcp_listen``'s.

Retiring with a grace period (what the owning TCPStore's close does): the server keeps
serving, in the background, until every connection from *another* process has closed, at
most ``grace`` seconds, so that a rank which finishes first does not pull the store from
under ranks still reading it; at interpreter exit the process waits for that (and retires
the servers nobody closed). This process's own clients (``note_local_client``) do not hold it
up. Sharing a port between the masters of one process, and reviving a retiring server when
the program starts over on its port, are ``tcp_servers``'s.
"""

from __future__ import annotations

import atexit
import functools
import logging
import selectors
import socket
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import cast

from .. import auth, config, tls
from .local_clients import address as _address
from .local_clients import is_local_client
from .tcp_auth import ServerGate, Verdict
from .tcp_engine import Refused, StoreEngine
from .tcp_listen import BACKLOG as _BACKLOG
from .tcp_listen import make_listener
from .tcp_protocol import Command, RequestDecoder

log = logging.getLogger(__name__)

_RECV_BYTES = 1 << 16
_LISTENER, _WAKER = object(), object()

# Every running server, so that interpreter exit drains the ones nobody closed.
LIVE_SERVERS: weakref.WeakSet[TCPStoreServer] = weakref.WeakSet()


def drain_at_exit(grace: float) -> None:
    """Retire every server of this process still running and wait until each has stopped
    (its peers left, or its grace passed)."""
    servers = [s for s in list(LIVE_SERVERS) if s.running]
    for server in servers:
        server.retire(grace)
    for server in servers:
        server.close(wait=True)


def exit_grace() -> float:
    """ACCORD_STORE_EXIT_GRACE, in seconds."""
    try:
        return config.store_exit_grace()
    except ValueError:  # a malformed variable must not keep a server from closing
        return float(config.STORE_EXIT_GRACE.default or 0)


@atexit.register
def _drain_servers_at_exit() -> None:
    """At interpreter exit (daemon threads still run in atexit handlers), stop the servers
    nobody closed only once other processes' clients have left, bounded by the grace."""
    drain_at_exit(exit_grace())


class _Connection:
    __slots__ = ("sock", "decoder", "out", "peer", "writing", "local", "gate", "io", "tls_pending")

    def __init__(self, sock: socket.socket, peer: object, gate: ServerGate | None) -> None:
        self.sock, self.peer, self.gate = sock, peer, gate
        self.io = tls.stream_of(sock)  # the socket, or its TLS adapter
        self.tls_pending = self.io is not sock  # a TLS handshake still to finish
        self.local = False  # a client of this process (known from its first request on)
        self.decoder = RequestDecoder()
        self.out: deque[memoryview] = deque()
        self.writing = False


#: ``TCPStoreServer(secret=...)`` default: the job's secret (``auth.job_secret()``).
JOB_SECRET: object = object()


class TCPStoreServer:
    """Serves one store on ``port`` (0: a free one; see ``port``) from a daemon thread.

    ``secret`` (default: the job's): clients must prove it (``tcp_auth``); ``admit(sock)``
    may let in a client that does not authenticate (accordrun: its own workers' processes).
    ``host``: the address clients are told; a loopback one keeps the server on loopback."""

    def __init__(
        self,
        port: int = 0,
        *,
        listen_fd: int | None = None,
        host: str | None = None,
        secret: bytes | object | None = JOB_SECRET,
        admit: Callable[[socket.socket], bool] | None = None,
    ) -> None:
        self._secret = auth.job_secret() if secret is JOB_SECRET else cast("bytes | None", secret)
        self._admit = admit
        # the server's TLS context, made now: a bad certificate file fails here
        self._tls = tls.contexts()[1] if tls.enabled() else None
        self._listener = make_listener(
            port, listen_fd, host, secured=self._secret is not None or bool(self._tls)
        )
        self.port: int = self._listener.getsockname()[1]
        self._engine = StoreEngine()
        self._conns: set[_Connection] = set()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKER)
        self._stopping = False
        self._host = host
        self._drain_until: float | None = None
        self._drain_lock = threading.Lock()  # retiring's end against ``revive``
        self._drain_over = False
        self._drain_started = 0.0
        self._drain_waited_for = 0
        self._thread = threading.Thread(
            target=self._serve, name=f"accord-tcpstore-server:{self.port}", daemon=True
        )
        self._thread.start()
        LIVE_SERVERS.add(self)

    def __repr__(self) -> str:
        return f"TCPStoreServer(port={self.port}, clients={len(self._conns)})"

    @property
    def num_connections(self) -> int:
        """Clients connected now (approximate while the server runs)."""
        return len(self._conns)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def remote_connections(self) -> int:
        """Connections not known to come from this process (approximate while it runs)."""
        return sum(1 for conn in list(self._conns) if not conn.local)

    @property
    def retiring(self) -> bool:
        """Serving only until other processes' clients leave (see ``retire``)."""
        return self._drain_until is not None and self.running

    def retire(self, grace: float) -> None:
        """Stop serving once every connection from another process has closed, at most
        ``grace`` seconds from now; returns at once (now, if there is none to wait for)."""
        if self._stopping or self._drain_until is not None:
            return
        waiting_for = self.remote_connections()
        if grace <= 0 or not waiting_for or sys.is_finalizing():
            return self.close()
        self._drain_started, self._drain_waited_for = time.monotonic(), waiting_for
        self._drain_until = self._drain_started + grace
        self._wake()

    def revive(self, host: str | None, secret: bytes | None) -> bool:
        """A retiring server serves on as before (True), if it still runs and was made with
        the same ``host`` and ``secret``; else nothing changes (False)."""
        if host != self._host or secret != self._secret or self._admit is not None:
            return False
        with self._drain_lock:
            if self._stopping or self._drain_over or not self.running:
                return False
            self._drain_until = None
        self._wake()
        return True

    def close(self, wait: bool = False) -> None:
        """Stop serving now and close every socket; with ``wait``, a retiring server is
        given the rest of its grace first. Idempotent."""
        here = threading.current_thread() is self._thread
        finalizing = sys.is_finalizing()
        if wait and self._drain_until is not None and not here and not finalizing:
            self._thread.join(max(0.0, self._drain_until - time.monotonic()) + 1.0)
        self._stopping = True
        self._wake()
        # During interpreter shutdown the daemon thread may already be frozen: joining it
        # would hang forever, and the process is about to close every socket anyway.
        if not here and not finalizing:
            self._thread.join()
        LIVE_SERVERS.discard(self)
        self._wake_w.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # -- the loop ---------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while not self._stopping and not self._drained():
                wait = None
                if self._drain_until is not None:
                    wait = max(0.0, self._drain_until - time.monotonic())
                for key, events in self._selector.select(wait):
                    self._dispatch(key.data, events)
        except Exception:  # a bug here must not vanish silently
            log.exception("TCPStore server on port %d stopped by an internal error", self.port)
        finally:
            self._shutdown()

    def _drained(self) -> bool:
        """While closing with a grace period: whether it is over (logged once, at debug)."""
        with self._drain_lock:
            if self._drain_until is None:
                return False
            left, now = self.remote_connections(), time.monotonic()
            if left and now < self._drain_until:
                return False
            self._drain_over = True  # decided: ``revive`` can no longer bring it back
        if self._drain_waited_for:
            log.debug(
                "TCPStore server on port %d: closed with %d client(s) of other processes "
                "connected; waited %.2f s for them to disconnect, %d still connected "
                "when it stopped",
                self.port,
                self._drain_waited_for,
                now - self._drain_started,
                left,
            )
        return True

    def _dispatch(self, tag: object, events: int) -> None:
        if tag is _LISTENER:
            self._accept()
        elif tag is _WAKER:
            try:
                self._wake_r.recv(4096)
            except OSError:
                pass
        elif isinstance(tag, _Connection) and tag in self._conns:
            if events & selectors.EVENT_WRITE:
                self._flush(tag)
            if events & selectors.EVENT_READ and tag in self._conns:
                self._receive(tag)

    def _accept(self) -> None:
        for _ in range(_BACKLOG):
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: keep serving the clients we have
                log.warning("TCPStore server on port %d: accept failed: %s", self.port, exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = tls.server_wrap(sock, handshake=False, context=self._tls)
            admit = self._admit
            gate = ServerGate(self._secret, None if admit is None else functools.partial(admit, sock))
            conn = _Connection(sock, peer, gate)
            self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _receive(self, conn: _Connection) -> None:
        try:
            if conn.tls_pending:
                if not tls.handshake_step(conn.sock):  # type: ignore[arg-type]
                    return
                conn.tls_pending = False
            data = conn.io.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            what = "TLS handshake" if conn.tls_pending else "read"
            return self._drop(conn, f"{what} failed: {exc}")
        if not data:
            why = None
            if conn.decoder.buffered:
                why = f"disconnected inside a request ({conn.decoder.buffered} bytes pending)"
            elif conn.gate is not None and conn.gate.server_nonce:
                why = "left during authentication (without proving the job's secret)"
            return self._drop(conn, why)
        if conn.gate is not None:
            verdict, reply, data = conn.gate.feed(data)
            if reply:
                self._deliver({conn: [reply]})
            if verdict is Verdict.REFUSED:
                return self._drop(conn, conn.gate.why)
            if verdict is Verdict.PENDING or conn not in self._conns:
                return
            conn.gate = None
            if not data:
                return
        replies: dict[_Connection, list[bytes]] = {}
        requests = conn.decoder.feed(data)
        if requests and requests[0].command is Command.VALIDATE:
            conn.local = is_local_client(conn.peer)  # noted before it sent this
        for request in requests:
            try:
                answers = self._engine.execute(conn, request)
            except Refused as exc:
                self._deliver(replies)
                return self._drop(conn, f"{request.command.name} refused: {exc}")
            for target, reply in answers:
                replies.setdefault(cast(_Connection, target), []).append(reply)
        self._deliver(replies)
        if conn.decoder.failed is not None:
            self._drop(conn, str(conn.decoder.failed))
        elif conn.io is not conn.sock and conn in self._conns and conn.io.pending():
            self._receive(conn)  # TLS holds decrypted bytes the selector cannot see

    def _deliver(self, replies: dict[_Connection, list[bytes]]) -> None:
        """Queue each connection's replies as one write, and send what the socket takes."""
        for conn, parts in replies.items():
            if conn in self._conns:
                conn.out.append(memoryview(b"".join(parts)))
                self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        try:
            while conn.out:
                head = conn.out[0]
                sent = conn.io.send(head)
                if sent < len(head):
                    conn.out[0] = head[sent:]
                    break
                conn.out.popleft()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            return self._drop(conn, f"write failed: {exc}")
        want = bool(conn.out)
        if want != conn.writing:
            conn.writing = want
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self._selector.modify(conn.sock, mask, conn)

    def _drop(self, conn: _Connection, why: str | None) -> None:
        if why is not None:
            host, port = _address(conn.peer) or (str(conn.peer), 0)
            log.warning(
                "TCPStore server on port %d: closed the connection of client %s:%d: %s",
                self.port,
                host,
                port,
                why,
            )
        self._conns.discard(conn)
        self._engine.disconnect(conn)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _shutdown(self) -> None:
        for conn in list(self._conns):
            self._drop(conn, None)
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        LIVE_SERVERS.discard(self)
