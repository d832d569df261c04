"""The TCP transport: one non-blocking socket per peer, driven by epoll in the waiting thread.

Owns: TcpLink (a peer's socket, its send queue and its frame reader) and TcpMesh (the epoll
loop). Socket errors become PeerError here and nowhere else. Must not know about algorithms,
groups or stores (the bootstrap in ``bootstrap.py`` hands over connected sockets).

Sends are eager: a frame is written at once with ``sendmsg([header, payload])`` and whatever
the socket does not take is finished by whichever thread drives the mesh, so two ranks sending
large messages to each other never deadlock. Receives land straight in the posted buffer:
headers and small payloads come through a 256 KiB staging buffer (one ``recv`` often brings
several frames), the rest of a large payload is read with ``recv_into`` into its destination.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import threading
import time
from collections import deque
from typing import Any

from ..errors import PeerError, ProtocolError
from .matching import SendRequest
from .mesh import Mesh, PeerState
from .wire import HEADER_SIZE, NO_FINGERPRINT, FrameKind, Header, pack_header, unpack_header

_STAGING_BYTES = 256 << 10
_IN = select.EPOLLIN | select.EPOLLRDHUP
_IN_OUT = _IN | select.EPOLLOUT
#: How long close() keeps flushing queued frames (GOODBYE included) to slow readers.
_CLOSE_FLUSH_SECONDS = 5.0


class TcpLink:
    """The connection to one peer: a send queue and an incremental frame reader."""

    def __init__(self, peer: int, sock: socket.socket) -> None:
        self.peer = peer
        self.sock = sock
        self.fd = sock.fileno()
        self.send_lock = threading.Lock()
        self.queue: deque[SendRequest] = deque()
        self.want_out = False
        self.staging = bytearray(_STAGING_BYTES)
        self.view = memoryview(self.staging)
        self.start = 0
        self.end = 0
        self.header: Header | None = None  # the frame whose payload is being read
        self.dest: memoryview | None = None
        self.filled = 0
        self.token: Any = None
        self.drained = False  # the last read returned less than asked: the socket is empty
        self.open = True


class TcpMesh(Mesh):
    name = "tcp"

    def __init__(self, rank: int, size: int, sockets: dict[int, socket.socket],
                 records: list[Any] | None = None) -> None:
        super().__init__(rank, size)
        self.records = records or []  # what each rank published (address, host identity)
        if self.records:
            self.host_ids = [rec.host_id for rec in self.records]
            self.pids = [rec.pid for rec in self.records]
            self.job_token = f"{self.records[0].pid:x}{self.records[0].port:x}"
            self.shm_allowed = True
        self._epoll = select.epoll()
        self._links: list[TcpLink | None] = [None] * size
        self._by_fd: dict[int, TcpLink] = {}
        for peer, sock in sockets.items():
            sock.setblocking(False)
            link = TcpLink(peer, sock)
            self._links[peer] = link
            self._by_fd[link.fd] = link
            self._epoll.register(link.fd, _IN)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._discard = memoryview(bytearray(64 << 10))

    # -- sending -------------------------------------------------------------------------------
    def _transmit(self, req: SendRequest) -> None:
        link = self._links[req.dst]
        if link is None:
            raise ValueError(f"rank {self.rank} has no link to rank {req.dst}")
        with link.send_lock:
            if not link.open:
                raise PeerError(f"{req.context}: the connection to rank {req.dst} is closed", peer=req.dst)
            link.queue.append(req)
            failure = self._flush(link) if len(link.queue) == 1 else None
            if failure is None and link.queue and not link.want_out:
                link.want_out = True
                self._epoll.modify(link.fd, _IN_OUT)
        if failure is not None:
            self._link_failed(link, failure)

    def _flush(self, link: TcpLink) -> OSError | None:
        """Write queued frames until the socket is full (send_lock held); return a socket error."""
        while link.queue:
            req = link.queue[0]
            head = len(req.header)
            try:
                if req.offset < head:
                    sent = link.sock.sendmsg([memoryview(req.header)[req.offset:], req.payload])
                else:
                    sent = link.sock.send(req.payload[req.offset - head:])
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                return exc
            req.offset += sent
            if req.offset < req.total:
                return None
            link.queue.popleft()
            self.complete_send(req)
        return None

    def _on_writable(self, link: TcpLink) -> None:
        with link.send_lock:
            failure = self._flush(link)
            if failure is None and not link.queue and link.want_out and link.open:
                link.want_out = False
                self._epoll.modify(link.fd, _IN)
        if failure is not None:
            self._link_failed(link, failure)

    # -- receiving ------------------------------------------------------------------------------
    def _drive(self, timeout: float) -> None:
        for fd, events in self._epoll.poll(timeout):
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            link = self._by_fd.get(fd)
            if link is None or not link.open:
                continue
            if events & select.EPOLLOUT:
                self._on_writable(link)
            if events & ~select.EPOLLOUT:
                self._on_readable(link)

    def _on_readable(self, link: TcpLink) -> None:
        try:
            while link.open:
                if link.header is not None:
                    if not self._read_payload(link):
                        return
                elif link.end - link.start >= HEADER_SIZE:
                    header = unpack_header(link.staging, link.start)
                    link.start += HEADER_SIZE
                    self._begin_frame(link, header)
                elif link.drained or not self._fill_staging(link):
                    link.drained = False  # epoll (level-triggered) says when more arrives
                    return
        except (BlockingIOError, InterruptedError):
            return
        except ProtocolError as exc:
            self._link_failed(link, exc)
        except OSError as exc:
            self._link_failed(link, exc)

    def _fill_staging(self, link: TcpLink) -> bool:
        """Read more bytes into the staging buffer; False when the socket has none now."""
        if link.start == link.end:
            link.start = link.end = 0
        elif len(link.staging) - link.end < HEADER_SIZE:
            remaining = link.end - link.start
            link.view[:remaining] = link.view[link.start:link.end]
            link.start, link.end = 0, remaining
        try:
            n = link.sock.recv_into(link.view[link.end:])
        except (BlockingIOError, InterruptedError):
            return False
        if n == 0:
            self._eof(link)
            return False
        link.drained = link.end + n < len(link.staging)
        link.end += n
        return True

    def _begin_frame(self, link: TcpLink, header: Header) -> None:
        kind = header.kind
        if kind == FrameKind.COLL or kind == FrameKind.P2P:
            dest, token = self.frame_arrived(link.peer, header)
        elif kind == FrameKind.HELLO:
            raise ProtocolError(f"rank {link.peer} sent a second HELLO on an open link")
        else:  # GOODBYE / POISON: small control payloads
            dest, token = memoryview(bytearray(header.nbytes)), ("control", header)
        link.header, link.dest, link.token, link.filled = header, dest, token, 0
        staged = min(link.end - link.start, header.nbytes)
        if staged:
            if dest is not None:
                dest[:staged] = link.view[link.start:link.start + staged]
            link.start += staged
            link.filled = staged
        if link.filled == header.nbytes:
            self._end_frame(link)

    def _read_payload(self, link: TcpLink) -> bool:
        """Read the rest of the current payload straight into its destination."""
        header = link.header
        assert header is not None
        want = header.nbytes - link.filled
        if link.dest is not None:
            target = link.dest[link.filled:]
        else:
            target = self._discard[:min(want, self._discard.nbytes)]
        try:
            n = link.sock.recv_into(target)
        except (BlockingIOError, InterruptedError):
            return False
        if n == 0:
            self._eof(link)
            return False
        link.filled += n
        short = n < target.nbytes
        if link.filled == header.nbytes:
            self._end_frame(link)
        return not short

    def _end_frame(self, link: TcpLink) -> None:
        header, token, dest = link.header, link.token, link.dest
        assert header is not None
        link.header, link.dest, link.token, link.filled = None, None, None, 0
        if isinstance(token, tuple) and token[0] == "control":
            assert dest is not None
            if header.kind == FrameKind.GOODBYE:
                self.peer_lost(link.peer, None)
            elif header.kind == FrameKind.POISON:
                self.poison_arrived(link.peer, header.group, bytes(dest).decode("utf-8", "replace"))
        elif token is not None:
            self.payload_complete(link.peer, token)

    # -- link failure ---------------------------------------------------------------------------
    def _eof(self, link: TcpLink) -> None:
        if self.peer_state[link.peer] is PeerState.OPEN and not self.closed:
            self._link_failed(link, None)
        else:
            self._shut(link)

    def _link_failed(self, link: TcpLink, exc: BaseException | None) -> None:
        if isinstance(exc, ProtocolError):
            reason = f"its byte stream is corrupt ({exc})"
        elif exc is None:
            reason = ("it closed the connection without saying goodbye: the process probably "
                      "died (killed, crashed, or exited without destroy_process_group)")
        else:
            reason = f"the connection broke ({errno.errorcode.get(getattr(exc, 'errno', 0) or 0, 'error')}: {exc})"
        error = PeerError(f"rank {link.peer} is gone: {reason}", peer=link.peer)
        self._shut(link, error)
        self.peer_lost(link.peer, error)

    def _shut(self, link: TcpLink, error: PeerError | None = None) -> None:
        """Stop using a link: unregister it, fail its queued sends, close the socket."""
        with link.send_lock:
            if not link.open:
                return
            link.open = False
            failed = list(link.queue)
            link.queue.clear()
        for req in failed:
            self.complete_send(req, error or PeerError(f"rank {link.peer} left before taking the data",
                                                       peer=link.peer))
        try:
            self._epoll.unregister(link.fd)
        except (OSError, ValueError):
            pass
        link.sock.close()

    # -- closing ---------------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        """Send GOODBYE after everything queued, flush for a few seconds, close every socket."""
        if not self.begin_close():
            return
        goodbye = pack_header(FrameKind.GOODBYE, 0, 0, 0, 0, NO_FINGERPRINT, 0)
        links = [link for link in self._links if link is not None and link.open]
        for link in links:
            with link.send_lock:
                link.queue.append(SendRequest(link.peer, goodbye, memoryview(b""), None, "goodbye"))
                self._flush(link)
        give_up = time.monotonic() + _CLOSE_FLUSH_SECONDS
        while any(link.queue for link in links) and time.monotonic() < give_up:
            for link in links:
                if link.queue and link.open:
                    select.select([], [link.sock], [], 0.05)
                    with link.send_lock:
                        if self._flush(link) is not None:
                            link.queue.clear()
        for link in links:
            self._drain_and_close(link)
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _drain_and_close(self, link: TcpLink) -> None:
        """Read what the peer already sent (its GOODBYE) so close() does not reset the stream."""
        try:
            while link.sock.recv_into(self._discard):
                pass
        except OSError:
            pass
        self._shut(link)
