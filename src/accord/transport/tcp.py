"""The TCP mesh: a socket to every peer, plus shared-memory rings to peers on this host.

Owns: TcpMesh — driving the links (``_drive``: epoll for sockets; polling, with the spin →
yield → sleep policy, for rings), the wake-up pipe that interrupts a driver (close, abort),
and closing. Socket errors become PeerError here and in ``stream.py``, nowhere else. Must not
know about algorithms, groups or stores (``bootstrap.py`` hands over connected sockets and
mapped rings).

A link with rings sends and receives every frame through them; its socket carries nothing
after the handshake and only tells, by its EOF, that the peer is gone (after the ring is
drained, so a GOODBYE in it counts).

A lost host (power loss, a pulled cable, a partition) closes nothing: while a thread drives,
every half second or so each socket link is asked whether the peer's kernel has left
something of ours unanswered for ``lost_after`` seconds (ACCORD_PEER_LOST_TIMEOUT;
``liveness``); such a link fails like a dead peer's, naming the host and its ranks. So does
one the kernel ended itself (ETIMEDOUT: its keepalive probes went unanswered).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time
from typing import Any

from ..errors import PeerError
from . import liveness, placement
from .matching import SendRequest
from .shm import oversubscribed
from .stream import StreamLink, StreamMesh
from .wire import NO_FINGERPRINT, FrameKind, pack_header

_IN = select.EPOLLIN | select.EPOLLRDHUP
_IN_OUT = _IN | select.EPOLLOUT
#: How long close() keeps flushing queued frames (GOODBYE included) to slow readers.
_CLOSE_FLUSH_SECONDS = 5.0
#: Ring polling: spin this long (unless oversubscribed), then yield, then sleep in epoll.
_SPIN_SECONDS = 50e-6
_YIELD_SECONDS = 2e-3
#: Least time between two looks at where the local peers run (placement): ring pollers look
#: when a drive stalls past its spin; TCP-only drivers, blocking in epoll, when they drive.
_PLACEMENT_SECONDS = 0.005
#: Most time between two looks at the links' silence (less when the budget is short).
_WATCH_SECONDS = 0.5


class TcpMesh(StreamMesh):
    name = "tcp"

    def __init__(
        self,
        rank: int,
        size: int,
        sockets: dict[int, socket.socket],
        records: list[Any] | None = None,
        rings: dict[int, tuple[Any, Any]] | None = None,
        spread: bool = False,
        lost_after: float = 0.0,
    ) -> None:
        super().__init__(rank, size)
        self.records = records or []  # what each rank published (address, host identity)
        if self.records:
            self.host_ids = [rec.host_id for rec in self.records]
            self.pids = [rec.pid for rec in self.records]
            self.job_token = f"{self.records[0].pid:x}{self.records[0].port:x}"
            self.shm_allowed = True
        rings = rings or {}
        self._epoll = select.epoll()
        self._by_fd: dict[int, StreamLink] = {}
        for peer, sock in sockets.items():
            sock.setblocking(False)
            link = StreamLink(peer, sock, rings.get(peer))
            self._links[peer] = link
            self._by_fd[link.fd] = link
            self._epoll.register(link.fd, _IN)
        self._ring_links = [link for link in self._links if link is not None and link.ring]
        self._spin = 0.0 if oversubscribed(len(self.local_ranks())) else _SPIN_SECONDS
        # A rank that drives its links beside a local peer on the same CPU moves (placement.py;
        # not when oversubscribed: sharing CPUs is unavoidable then).
        self._local_pids = [self.pids[p] for p in self.local_ranks() if p != rank and self.pids[p]]
        self._placing = spread and bool(self._spin and self._local_pids) and placement.available()
        self._next_placement = 0.0
        self.moves = 0  # times this rank moved off a local peer's CPU (tests, diagnostics)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        #: seconds of silence from a peer's host after which its link fails (0: never)
        self.lost_after = lost_after
        self._watch_every = min(_WATCH_SECONDS, lost_after / 4)
        self._silent = liveness.SilentPeers(lost_after, confirm=self._watch_every)
        self._next_watch = 0.0 if lost_after > 0 else float("inf")

    @property
    def ring_peers(self) -> list[int]:
        """Peers whose frames travel through shared-memory rings."""
        return [link.peer for link in self._ring_links]

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
            if failure is None and link.queue and not link.want_out and not link.ring:
                link.want_out = True
                self._epoll.modify(link.fd, _IN_OUT)
        if failure is not None:
            self._link_failed(link, failure)

    def _on_writable(self, link: StreamLink) -> None:
        with link.send_lock:
            failure = self._flush(link)
            if failure is None and not link.queue and link.want_out and link.open:
                link.want_out = False
                self._epoll.modify(link.fd, _IN)
        if failure is not None:
            self._link_failed(link, failure)

    # -- driving --------------------------------------------------------------------------------
    def _drive(self, timeout: float) -> None:
        if not self._ring_links:
            now = time.monotonic()
            if now >= self._next_watch:
                self._watch(now)
            if self._placing:  # blocking in epoll: no stall to wait for, so look now and then
                self._spread(now)
            self._dispatch(self._epoll.poll(timeout))
            return
        clock = time.monotonic
        start = clock()
        if start >= self._next_watch:
            self._watch(start)
        pause = 0.0
        placing = self._placing
        while True:
            if self._poll_rings():
                return
            waited = clock() - start
            if waited < self._spin:
                continue
            if placing:  # stalled past the spin (idle time): is a local peer on this CPU?
                placing = False
                self._spread(start + waited)
            if waited >= timeout:
                self._dispatch(self._epoll.poll(0))
                return
            if waited < _YIELD_SECONDS:
                events = self._epoll.poll(0)
                if events:
                    self._dispatch(events)
                    return
                os.sched_yield()
                continue
            pause = min(max(pause * 2, 20e-6), 1e-3, timeout - waited)
            events = self._epoll.poll(pause)  # sleeping in epoll: sockets still wake us at once
            if events:
                self._dispatch(events)
                return

    def _spread(self, now: float) -> None:
        """If a local peer's process last ran on this thread's CPU, move to another. At most
        every ``_PLACEMENT_SECONDS``: each look reads /proc (about 17 µs a peer)."""
        if now < self._next_placement:
            return
        self._next_placement = now + _PLACEMENT_SECONDS
        cpu = placement.current_cpu()
        theirs = [placement.cpu_of(pid) for pid in self._local_pids]
        if cpu in theirs and placement.move_off(cpu, theirs, self.rank) is not None:
            self.moves += 1

    def _watch(self, now: float) -> None:
        """Fail the socket links whose peer host has left us unanswered for ``lost_after`` s."""
        self._next_watch = now + self._watch_every
        for link in self._links:
            if link is None or link.ring or not link.open:
                continue  # a ring's peer shares this host: if that host is lost, so are we
            silent = self._silent.lost_after(link.peer, link.sock, now)
            if silent:
                detail = f"nothing acknowledged for {silent:.1f} s"
                self._link_failed(link, TimeoutError(errno.ETIMEDOUT, detail))

    def _failure_reason(self, peer: int, exc: BaseException | None) -> str:
        if not isinstance(exc, OSError) or exc.errno != errno.ETIMEDOUT:
            return super()._failure_reason(peer, exc)
        if self.lost_after > 0:
            limit = f"ACCORD_PEER_LOST_TIMEOUT={self.lost_after:g} s"
        else:
            limit = "ACCORD_PEER_LOST_TIMEOUT is off: the kernel's own limit"
        where, ranks = self._host_of(peer)
        return (
            f"its host{where} stopped answering ({exc.strerror}; {limit}): the host is down "
            f"or cut off from this one (power loss, a pulled cable, a network partition). "
            f"Ranks on that host: {ranks}"
        )

    def _host_of(self, peer: int) -> tuple[str, str]:
        """(' name (address)' or '', the ranks that host runs) for messages."""
        ranks = ", ".join(str(r) for r, host in enumerate(self.host_ids) if host == self.host_ids[peer])
        if not self.records:
            return "", ranks
        record = self.records[peer]
        return f" {record.host_id.split('/', 1)[0]} ({record.host})", ranks

    def _poll_rings(self) -> bool:
        """Move whatever the rings allow; True if anything moved."""
        moved, written = False, self.writes
        for link in self._ring_links:
            if not link.open:
                continue
            if link.queue:
                self._on_writable(link)
            if link.rx.readable():  # type: ignore[attr-defined]
                self._on_readable(link)
                moved = True
        return moved or self.writes != written

    def _dispatch(self, events: list[tuple[int, int]]) -> None:
        for fd, mask in events:
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            link = self._by_fd.get(fd)
            if link is None or not link.open:
                continue
            if link.ring:
                self._on_ring_socket(link)
                continue
            if mask & select.EPOLLOUT:
                self._on_writable(link)
            if mask & ~select.EPOLLOUT:
                self._on_readable(link)

    def _on_ring_socket(self, link: StreamLink) -> None:
        """A ring link's socket stirred: it carries no data, so this is the peer going away."""
        try:
            data = link.io.recv(1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._on_readable(link)  # drain the ring first: a GOODBYE in it counts
            self._link_failed(link, exc)
            return
        self._on_readable(link)
        if not data:
            self._eof(link)

    def _forget(self, link: StreamLink) -> None:
        try:
            self._epoll.unregister(link.fd)
        except (OSError, ValueError):
            pass
        if link in self._ring_links:
            self._ring_links = [other for other in self._ring_links if other is not link]

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
        progress = self.goodbye_payload()
        goodbye = pack_header(FrameKind.GOODBYE, 0, 0, 0, 0, NO_FINGERPRINT, len(progress))
        links = [link for link in self._links if link is not None and link.open]
        for link in links:
            with link.send_lock:
                link.queue.append(SendRequest(link.peer, goodbye, memoryview(progress), None, "goodbye"))
                self._flush(link)
        give_up = time.monotonic() + _CLOSE_FLUSH_SECONDS
        while any(link.queue for link in links if link.open) and time.monotonic() < give_up:
            for link in links:
                if link.queue and link.open:
                    if link.ring:
                        time.sleep(0.001)
                    else:
                        select.select([], [link.sock], [], 0.05)
                    with link.send_lock:
                        if self._flush(link) is not None:
                            link.queue.clear()
        for link in links:
            self._drain_and_close(link)
        for maybe in self._links:
            if maybe is not None and maybe.ring:
                maybe.tx.release()  # type: ignore[attr-defined]
                maybe.rx.release()  # type: ignore[attr-defined]
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _drain_and_close(self, link: StreamLink) -> None:
        """Read what the peer already sent (its GOODBYE) so close() does not reset the stream."""
        try:
            while link.io.recv_into(self._discard):
                pass
        except OSError:
            pass
        self._shut(link)
