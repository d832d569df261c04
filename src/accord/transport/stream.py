"""Frames over byte streams: the send queue and the incremental frame reader of a link.

Owns: ``StreamLink`` (one peer: where bytes go out and come in, the queue of frames still
being written, the reader's staging buffer and current frame) and ``StreamMesh``, which turns
streams into frames and frames into deliveries (via Mesh), handles a link that ends (GOODBYE
first → the peer left; otherwise it died) and closing. A stream is a non-blocking socket, or a
pair of shared-memory rings (``shm_ring``) with the socket kept to notice a peer's death.
Must not know about epoll, algorithms or groups: ``tcp.py`` drives it.

Sends are eager: a frame is written at once (``sendmsg([header, payload])``) and whatever the
stream does not take is finished by whichever thread drives the mesh, so two ranks sending
large messages to each other never deadlock. Headers and small payloads come through a
256 KiB staging buffer (one read often brings several frames); the rest of a large payload is
read with ``recv_into`` straight into its destination.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections import deque
from typing import Any, Protocol

from ..errors import PeerError, ProtocolError
from ..tls import stream_of
from .matching import SendRequest
from .mesh import Mesh, PeerState
from .wire import HEADER_SIZE, FrameKind, Header, unpack_header

_STAGING_BYTES = 256 << 10
#: The largest GOODBYE / POISON / LEAVE payload a peer may send (a reason, positions).
_MAX_CONTROL_BYTES = 1 << 20


class Writer(Protocol):
    def sendmsg(self, buffers: list[memoryview]) -> int: ...
    def send(self, buf: memoryview) -> int: ...


class Reader(Protocol):
    def recv_into(self, target: memoryview) -> int: ...


class StreamLink:
    """The connection to one peer: a send queue and an incremental frame reader."""

    def __init__(self, peer: int, sock: socket.socket, rings: tuple[Any, Any] | None = None) -> None:
        self.peer = peer
        self.sock = sock
        self.io = stream_of(sock)  # the socket, or its TLS adapter
        self.fd = sock.fileno()
        self.tx: Writer = rings[0] if rings else self.io
        self.rx: Reader = rings[1] if rings else self.io
        self.ring = rings is not None  # data goes through shared memory; the socket is for EOF
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
        self.drained = False  # the last read returned less than asked: nothing more for now
        self.open = True


class StreamMesh(Mesh):
    """Mesh over stream links; subclasses drive them (``_drive``) and close sockets."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self._links: list[StreamLink | None] = [None] * size
        self._discard = memoryview(bytearray(64 << 10))
        self.writes = 0  # successful writes so far: lets a poller see that a send moved

    def _flush(self, link: StreamLink) -> OSError | None:
        """Write queued frames until the socket is full (send_lock held); return a socket error."""
        while link.queue:
            req = link.queue[0]
            head = len(req.header)
            try:
                if req.offset < head:
                    sent = link.tx.sendmsg([memoryview(req.header)[req.offset :], req.payload])
                else:
                    sent = link.tx.send(req.payload[req.offset - head :])
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                return exc
            req.offset += sent
            self.writes += 1
            if req.offset < req.total:
                return None
            link.queue.popleft()
            self.complete_send(req)
        return None

    def _on_readable(self, link: StreamLink) -> None:
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
        except MemoryError:  # a frame announcing more than this process can ever buffer
            nbytes = link.header.nbytes if link.header is not None else "?"
            self._link_failed(
                link,
                ProtocolError(
                    f"rank {link.peer} announced a message of {nbytes} bytes that cannot be "
                    f"buffered here (out of memory): a corrupt stream, or a message far too large"
                ),
            )

    def _fill_staging(self, link: StreamLink) -> bool:
        """Read more bytes into the staging buffer; False when the socket has none now."""
        if link.start == link.end:
            link.start = link.end = 0
        elif len(link.staging) - link.end < HEADER_SIZE:
            remaining = link.end - link.start
            link.view[:remaining] = link.view[link.start : link.end]
            link.start, link.end = 0, remaining
        try:
            n = link.rx.recv_into(link.view[link.end :])
        except (BlockingIOError, InterruptedError):
            return False
        if n == 0:
            self._eof(link)
            return False
        link.drained = link.end + n < len(link.staging)
        link.end += n
        return True

    def _begin_frame(self, link: StreamLink, header: Header) -> None:
        kind = header.kind
        if kind == FrameKind.COLL or kind == FrameKind.P2P:
            dest, token = self.frame_arrived(link.peer, header)
        elif kind == FrameKind.HELLO:
            raise ProtocolError(f"rank {link.peer} sent a second HELLO on an open link")
        else:  # GOODBYE / POISON / LEAVE: small control payloads
            if header.nbytes > _MAX_CONTROL_BYTES:
                raise ProtocolError(
                    f"rank {link.peer} sent a {FrameKind(kind).name} frame of "
                    f"{header.nbytes} bytes (at most {_MAX_CONTROL_BYTES}): a "
                    f"corrupt stream"
                )
            dest, token = memoryview(bytearray(header.nbytes)), ("control", header)
        link.header, link.dest, link.token, link.filled = header, dest, token, 0
        staged = min(link.end - link.start, header.nbytes)
        if staged:
            if dest is not None:
                dest[:staged] = link.view[link.start : link.start + staged]
            link.start += staged
            link.filled = staged
        if link.filled == header.nbytes:
            self._end_frame(link)

    def _read_payload(self, link: StreamLink) -> bool:
        """Read the rest of the current payload straight into its destination."""
        header = link.header
        assert header is not None
        want = header.nbytes - link.filled
        if link.dest is not None:
            target = link.dest[link.filled :]
        else:
            target = self._discard[: min(want, self._discard.nbytes)]
        try:
            n = link.rx.recv_into(target)
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

    def _end_frame(self, link: StreamLink) -> None:
        header, token, dest = link.header, link.token, link.dest
        assert header is not None
        link.header, link.dest, link.token, link.filled = None, None, None, 0
        if isinstance(token, tuple) and token[0] == "control":
            assert dest is not None
            if header.kind == FrameKind.GOODBYE:
                self.peer_lost(link.peer, None, bytes(dest))
            elif header.kind == FrameKind.POISON:
                self.poison_arrived(link.peer, header.group, bytes(dest).decode("utf-8", "replace"))
            elif header.kind == FrameKind.LEAVE:
                self.group_left(link.peer, header.group, bytes(dest))
        elif token is not None:
            self.payload_complete(link.peer, token)

    # -- link failure ---------------------------------------------------------------------------
    def _eof(self, link: StreamLink) -> None:
        if self.peer_state[link.peer] is PeerState.OPEN and not self.closed:
            self._link_failed(link, None)
        else:
            self._shut(link)

    def _link_failed(self, link: StreamLink, exc: BaseException | None) -> None:
        error = PeerError(f"rank {link.peer} is gone: {self._failure_reason(link.peer, exc)}", peer=link.peer)
        self._shut(link, error)
        self.peer_lost(link.peer, error)

    def _failure_reason(self, peer: int, exc: BaseException | None) -> str:
        """Why the link to ``peer`` failed (``exc``: None for an EOF without GOODBYE)."""
        if isinstance(exc, ProtocolError):
            return f"its byte stream is corrupt ({exc})"
        if exc is None:
            return (
                "it closed the connection without saying goodbye: the process probably "
                "died (killed, crashed, or exited without destroy_process_group)"
            )
        return f"the connection broke ({errno.errorcode.get(getattr(exc, 'errno', 0) or 0, 'error')}: {exc})"

    def _shut(self, link: StreamLink, error: PeerError | None = None) -> None:
        """Stop using a link: unregister it, fail its queued sends, close the socket."""
        with link.send_lock:
            if not link.open:
                return
            link.open = False
            failed = list(link.queue)
            link.queue.clear()
        for req in failed:
            self.complete_send(
                req, error or PeerError(f"rank {link.peer} left before taking the data", peer=link.peer)
            )
        self._forget(link)
        link.sock.close()

    def _forget(self, link: StreamLink) -> None:
        """Stop watching a link's socket (the driver's business)."""
