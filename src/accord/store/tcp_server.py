"""The TCPStore server: one daemon thread moving bytes between sockets and a StoreEngine.

Owns: the listening socket, accepting, non-blocking reads and writes with ``selectors``,
per-connection decoders and output queues, waking at the next parked timeout, dropping
misbehaving clients, and shutdown. What a request means is ``tcp_engine``'s; the bytes are
``tcp_protocol``'s. Must not know the client (``tcp_store``) or ranks.

A client that breaks the protocol (garbage, a frame above the size limit, a truncated frame
followed by a disconnect) is dropped: its socket is closed, its parked request forgotten, and
no other client notices. The server listens on every interface, as torch's does.
"""

from __future__ import annotations

import logging
import selectors
import socket
import sys
import threading
import time
from collections import deque

from ..errors import DistStoreError, ProtocolError
from .tcp_engine import StoreEngine
from .tcp_protocol import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encode_response

log = logging.getLogger(__name__)

_BACKLOG = 2048
_RECV_BYTES = 1 << 16
_MAX_SLEEP_S = 60.0  # a client may send any finite timeout; select() must not overflow
_LISTENER, _WAKER = object(), object()


def _make_listener(port: int, listen_fd: int | None) -> socket.socket:
    """A non-blocking listening socket on ``port`` (all interfaces), or on ``listen_fd``."""
    if listen_fd is not None:
        try:
            sock = socket.socket(fileno=listen_fd)  # takes ownership of the descriptor
            sock.listen(_BACKLOG)
        except OSError as exc:
            raise DistStoreError(
                f"TCPStore server: cannot listen on master_listen_fd={listen_fd} "
                f"({exc.strerror or exc}); pass the descriptor of a bound TCP socket.") from exc
    else:
        try:
            sock = _bind(port)
        except OSError as exc:
            raise DistStoreError(
                f"TCPStore server: could not listen on port {port} ({exc.strerror or exc}). Is "
                f"another job using it? Pick another MASTER_PORT, or pass port 0 for a free one."
            ) from exc
    sock.setblocking(False)
    return sock


def _bind(port: int) -> socket.socket:
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, backlog=_BACKLOG,
                                        dualstack_ipv6=True)
        except OSError as exc:
            if exc.errno == getattr(socket, "EADDRINUSE", 98):
                raise
    return socket.create_server(("", port), family=socket.AF_INET, backlog=_BACKLOG)


class _Connection:
    __slots__ = ("sock", "decoder", "out", "peer", "writing")

    def __init__(self, sock: socket.socket, peer: object, max_frame_bytes: int) -> None:
        self.sock, self.peer = sock, peer
        self.decoder = FrameDecoder(requests=True, max_frame_bytes=max_frame_bytes)
        self.out: deque[memoryview] = deque()
        self.writing = False


class TCPStoreServer:
    """Serves one store on ``port`` (0: a free one; see ``port``) from a daemon thread."""

    def __init__(self, port: int = 0, *, listen_fd: int | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._listener = _make_listener(port, listen_fd)
        self.port: int = self._listener.getsockname()[1]
        self._max_frame_bytes = max_frame_bytes
        self._engine = StoreEngine()
        self._conns: set[_Connection] = set()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKER)
        self._stopping = False
        self._thread = threading.Thread(
            target=self._serve, name=f"accord-tcpstore-server:{self.port}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"TCPStoreServer(port={self.port}, clients={len(self._conns)})"

    @property
    def num_connections(self) -> int:
        """Clients connected now (approximate while the server runs)."""
        return len(self._conns)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop serving, close every socket, and join the thread. Idempotent."""
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        # During interpreter shutdown the daemon thread may already be frozen: joining it
        # would hang forever, and the process is about to close every socket anyway.
        if threading.current_thread() is not self._thread and not sys.is_finalizing():
            self._thread.join()
        self._wake_w.close()

    # -- the loop ---------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while not self._stopping:
                deadline = self._engine.next_deadline()
                wait = None
                if deadline is not None:
                    wait = min(max(0.0, deadline - time.monotonic()), _MAX_SLEEP_S)
                for key, events in self._selector.select(wait):
                    self._dispatch(key.data, events)
                self._deliver(self._engine.expire(time.monotonic()))
        except Exception:  # noqa: BLE001 - a bug here must not vanish silently
            log.exception("TCPStore server on port %d stopped by an internal error", self.port)
        finally:
            self._shutdown()

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
            conn = _Connection(sock, peer, self._max_frame_bytes)
            self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _receive(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self._drop(conn, f"read failed: {exc}")
        if not data:
            why = f"disconnected inside a frame ({conn.decoder.buffered} bytes pending)"
            return self._drop(conn, why if conn.decoder.buffered else None)
        try:
            requests = conn.decoder.feed(data)
        except ProtocolError as exc:
            return self._drop(conn, str(exc))
        for request in requests:
            self._deliver(self._engine.submit(conn, request, time.monotonic()))

    def _deliver(self, replies: list) -> None:
        for conn, response in replies:
            if conn in self._conns:
                conn.out.append(memoryview(encode_response(response)))
                self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        try:
            while conn.out:
                head = conn.out[0]
                sent = conn.sock.send(head)
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
            log.warning("TCPStore server on port %d: dropped client %s: %s",
                        self.port, conn.peer, why)
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
