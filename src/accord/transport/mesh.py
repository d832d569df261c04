"""Mesh: rank → peers, and what every transport shares.

Owns: posting sends and receives, delivering frames into posted buffers or parking them, the
checks of a collective's frames against the call running here (mismatches), peer
loss (died → every group containing the peer breaks; left → only receives from it fail), and
POISON frames that carry a group's failure to its other members. The wait loop is in
``waiting``, what a leaver says and what the others make of it (GOODBYE, LEAVE) in ``leaving``,
``Channel`` (one group's view of the mesh) in ``channel``. Must not know about
algorithms, process groups or stores; concrete transports (tcp, loopback) supply ``_transmit``
(start sending one frame) and ``_drive`` (do I/O for a while).

Every rank number here is a global rank (a position in the mesh).

Locking: ``lock`` guards the matcher, peer states and channel errors. A request's ``done``
flag is set once, sometimes without the lock (by the thread that owns the request at that
moment); waiters count themselves in ``_waiters`` *before* checking ``done``, so a setter that
sees no waiters can skip the notify without anybody missing a wake-up.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ..errors import CollectiveMismatchError, DestroyedGroupError, PeerError, with_context
from .channel import Channel, Describe, PeerState, default_describe
from .leaving import Leaving
from .matching import Matcher, Parked, RecvRequest, SendRequest, frame_error, match_key, mismatch_error
from .waiting import TICK, Waiting
from .wire import NO_FINGERPRINT, Fingerprint, FrameKind, Header, pack_header

Request = "SendRequest | RecvRequest"
#: Bytes of parking buffers kept for reuse (frames that arrive before their receive is posted
#: are common: a peer that is a little ahead sends its next call's data early).
_PARKING_POOL_BYTES = 64 << 20


class Mesh(Waiting, Leaving, ABC):
    """Links from this rank to every other rank, and the logic shared by all transports."""

    name = "mesh"
    #: Whether a waiting thread must drive I/O (sockets); False when senders deliver directly.
    needs_driver = True

    def __init__(self, rank: int, size: int) -> None:
        self.rank = rank
        self.size = size
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self._waiters = 0
        self.matcher = Matcher()
        self.peer_state = [PeerState.OPEN] * size
        self.peer_error: dict[int, PeerError] = {}
        self._channels: dict[int, Channel] = {}
        self._early_poison: dict[int, BaseException] = {}
        #: per group: the last call that ended on this rank (told to peers with GOODBYE)
        self.ended: dict[int, int] = {}
        #: per peer that said GOODBYE: the last call it ended on each group (0 if not named)
        self.left_after: dict[int, dict[int, int]] = {}
        #: per peer that destroyed groups while staying (LEAVE): the last call it ended in each
        self.left_groups: dict[int, dict[int, int]] = {}
        self._driving = False
        self._watched: list[tuple[Any, Any]] = []  # (request, on_done) kept moving
        self._progress_thread: threading.Thread | None = None
        self._pool: dict[int, list[bytearray]] = {}
        self._pooled_bytes = 0
        self.closed = False
        #: Set when the whole world is being destroyed: GOODBYE will tell the peers about
        #: every group at once, so destroying each group sends no LEAVE of its own.
        self.leaving = False
        #: Set when this rank leaves the mesh for the job's next world (a membership change:
        #: shrink_group, grow_group): its GOODBYE says so, and the peers do not count it lost
        self.moving = False
        # What the layers above need to decide on shared memory; transports fill them in.
        self.host_ids: list[str] = [f"unknown-{r}" for r in range(size)]
        self.pids: list[int] = [0] * size
        self.job_token = "job"
        self.threaded = False  # ranks are threads of one process (loopback tests)
        self.shm_allowed = False

    def local_ranks(self) -> list[int]:
        """The ranks on this rank's host (shared memory is possible between them)."""
        mine = self.host_ids[self.rank]
        return [r for r, host in enumerate(self.host_ids) if host == mine]

    def poll_nowait(self) -> None:
        """Do whatever I/O is ready without blocking (peer loss, POISON), unless another
        thread is driving; used by waits that do not go through the transport (shared memory)."""
        if not self.needs_driver:
            return
        with self.lock:
            if self._driving or self.closed:
                return
            self._driving = True
        try:
            self._drive(0)
        finally:
            with self.lock:
                self._driving = False
                self._notify_locked()

    # -- for the concrete transports -------------------------------------------------------
    @abstractmethod
    def _transmit(self, req: SendRequest) -> None:
        """Start sending ``req`` (lock not held); complete it via complete_send."""

    @abstractmethod
    def _drive(self, timeout: float) -> None:
        """Do I/O for at most ``timeout`` seconds (one thread at a time, lock not held)."""

    def _wake(self) -> None:
        """Interrupt a thread blocked in _drive (for close/abort). Default: nothing to do."""

    @abstractmethod
    def close(self) -> None:
        """Say GOODBYE to every open peer and release the links. Idempotent."""

    # -- channels ----------------------------------------------------------------------------
    def open_channel(
        self, group_id: int, members: Sequence[int], describe: Describe | None = None
    ) -> Channel:
        with self.lock:
            if group_id in self._channels:
                raise ValueError(f"group id {group_id} is already open on this mesh")
            channel = Channel(self, group_id, members, describe or default_describe)
            channel.error = self._early_poison.pop(group_id, None)
            for peer in channel.members:
                if self.peer_state[peer] is PeerState.DEAD and channel.error is None:
                    channel.error = self.peer_error[peer]
            self._channels[group_id] = channel
            return channel

    # -- posting -----------------------------------------------------------------------------
    def post_send(self, req: SendRequest) -> SendRequest:
        self._check_usable(req.channel, req.context)
        if self.peer_state[req.dst] is not PeerState.OPEN:
            # fail the request, not the call: an earlier request of the same call (a receive
            # that found a mismatch) may hold the root cause, and wait() reports errors in order
            self.complete_send(req, self._gone_error(req.dst, req.context))
            return req
        self._transmit(req)
        return req

    def post_recv(
        self,
        src: int | None,
        kind: int,
        key: Any,
        buf: memoryview | None,
        expect: Fingerprint | None,
        channel: Channel,
        context: Any,
    ) -> RecvRequest:
        with self.lock:
            req = RecvRequest(src, kind, key, buf, expect, channel, context, self.matcher.next_order())
            self._check_usable(channel, context)
            entry = self.matcher.take_parked(req)
            if entry is not None:
                self._claim(req, entry)
            elif src is not None and self.peer_state[src] is not PeerState.OPEN:
                req.error, req.done = self._gone_error(src, req.context), True
            else:
                self.matcher.post(req)
            return req

    def _check_usable(self, channel: Channel, context: Any) -> None:
        if self.closed:
            raise PeerError(f"{context}: this process group was destroyed; create a new one")
        if self._channels.get(channel.group_id) is not channel:
            raise DestroyedGroupError(
                f"{context}: this process group was destroyed on this "
                f"rank (destroy_process_group); create a new one with new_group"
            )
        if channel.error is not None:
            raise with_context(channel.error, context)

    def gone_error(self, peers: Sequence[int], context: Any) -> PeerError | None:
        """The error to raise if any of ``peers`` has left or died, else None."""
        gone = [peer for peer in peers if self.peer_state[peer] is not PeerState.OPEN]
        dead = [peer for peer in gone if self.peer_state[peer] is PeerState.DEAD]
        return self._gone_error((dead or gone)[0], context) if gone else None  # (a death first)

    def _gone_error(self, peer: int, context: Any) -> PeerError:
        if self.peer_state[peer] is PeerState.DEAD:
            return PeerError(f"{context}: {self.peer_error[peer]}", peer=peer)
        if self.peer_state[peer] is PeerState.MOVED:  # (a survivor that shrank or grew first)
            return self._moved_error(peer, context, "")
        return PeerError(
            f"{context}: rank {peer} has left the group (it called destroy_process_group or "
            f"exited) and will send nothing more",
            peer=peer,
        )

    def _claim(self, req: RecvRequest, entry: Parked) -> None:
        """A new receive matched a parked frame (lock held)."""
        error = frame_error(req, entry.src, entry.header, req.channel.describe)
        if error is not None:
            req.error, req.done = error, True
        elif entry.complete:
            if req.buf is None:
                req.buf = memoryview(entry.data)  # any size: the parked buffer is handed over
            else:
                req.buf[:] = entry.data
                self._recycle(entry.data)
            req.source, req.done = entry.src, True
        else:
            entry.claimed_by, req.claimed = req, True

    def _parking_buffer(self, nbytes: int) -> bytearray:
        """A buffer for a parked payload: a recycled one of the same size if any (lock held)."""
        free = self._pool.get(nbytes)
        if free:
            self._pooled_bytes -= nbytes
            return free.pop()
        return bytearray(nbytes)

    def _recycle(self, data: bytearray) -> None:
        if 0 < len(data) and self._pooled_bytes + len(data) <= _PARKING_POOL_BYTES:
            self._pool.setdefault(len(data), []).append(data)
            self._pooled_bytes += len(data)

    # -- arrivals (called by the concrete transports) -------------------------------------
    def begin_call(self, channel: Channel, seq: int, fp: Fingerprint, context: Any) -> None:
        """Register call ``seq`` and check the frames that arrived before it started: one of
        this call with another fingerprint, or one of a finished call that nothing consumed
        (a peer sent what this rank never expected), is a mismatch."""
        with self.lock:
            channel.running[seq] = (fp, context)
            early = self.matcher.parked_collective(channel.group_id, seq)
            wrong = next(
                (
                    e
                    for e in early
                    if (e.header.seq == seq and e.header.fingerprint != fp) or e.header.seq in channel.history
                ),
                None,
            )
        if wrong is None:
            return
        theirs, when = wrong.header.fingerprint, wrong.header.seq
        ours = fp if when == seq else channel.history.get(when)
        if ours is None or ours == theirs:
            error: BaseException = CollectiveMismatchError(
                f"{context}: rank {wrong.src} sent a message for {channel.describe(theirs, when)} "
                f"that this rank never asked for. Every rank must call the same collectives, in "
                f"the same order, with matching dtypes, sizes and roots"
            )
        else:
            error = mismatch_error(context, wrong.src, theirs, ours, when, channel.describe)
        self.break_channel(channel, error, notify_peers=True)
        raise error

    def frame_arrived(self, src: int, header: Header) -> tuple[memoryview | None, Any]:
        """Find where this frame's payload goes (lock taken here).

        Returns (destination, token): destination None means "read and discard"; pass the
        token to payload_complete once the payload is in.
        """
        mismatch: tuple[Channel, BaseException] | None = None
        with self.lock:
            if header.kind == FrameKind.COLL:
                mismatch = self._check_running(src, header)
            key = match_key(header.kind, header.group, header.seq, header.step, header.tag)
            req = self.matcher.take_posted(src, key)
            if req is None:
                entry = Parked(src, header, self._parking_buffer(header.nbytes), complete=False)
                self.matcher.park(entry)
                destination: tuple[memoryview | None, Any] = (memoryview(entry.data), entry)
            else:
                error = frame_error(req, src, header, req.channel.describe)
                if error is not None:
                    req.error, req.done = error, True
                    self._notify_locked()
                    destination = (None, None)
                else:
                    req.claimed = True
                    if req.buf is None:
                        req.buf = memoryview(bytearray(header.nbytes))
                    destination = (req.buf, req)
        if mismatch is not None:
            self.break_channel(mismatch[0], mismatch[1], notify_peers=True)
        return destination

    def _check_running(self, src: int, header: Header) -> tuple[Channel, BaseException] | None:
        """A frame of a call in progress here whose fingerprint differs, or of a call that
        already finished here (nothing will ever take it: the peer ran another call, e.g.
        with another root): a mismatch, raised now rather than by a later call (lock held)."""
        channel = self._channels.get(header.group)
        if channel is None:
            return None
        running = channel.running.get(header.seq)
        if running is not None:
            if running[0] == header.fingerprint:
                return None
            fp, context = running
            return channel, mismatch_error(context, src, header.fingerprint, fp, header.seq, channel.describe)
        ours = channel.history.get(header.seq)
        if ours is None:
            return None
        context = (
            next(iter(channel.running.values()))[1]
            if channel.running
            else f"group {channel.group_id} on rank {self.rank}"
        )
        if ours == header.fingerprint:
            return channel, CollectiveMismatchError(
                f"{context}: rank {src} sent a message for {channel.describe(ours, header.seq)}, "
                f"which ended here without it. Every rank must call the same collectives, in the "
                f"same order, with matching dtypes, sizes and roots"
            )
        return channel, mismatch_error(context, src, header.fingerprint, ours, header.seq, channel.describe)

    def payload_complete(self, src: int, token: Any) -> None:
        if isinstance(token, RecvRequest):
            token.source = src
            token.done = True  # the driving thread owns a claimed request: no lock needed
            self._notify()
            return
        with self.lock:
            token.complete = True
            req = token.claimed_by
            if req is not None:
                if req.buf is None:
                    req.buf = memoryview(token.data)
                else:
                    req.buf[:] = token.data
                    self._recycle(token.data)
                req.source, req.done = src, True
                self._notify_locked()

    def complete_send(self, req: SendRequest, error: BaseException | None = None) -> None:
        req.error = error
        req.done = True
        self._notify()

    def _notify(self) -> None:
        """Wake waiting threads, if any (lock not held)."""
        if self._waiters:
            with self.lock:
                self.cond.notify_all()

    def _notify_locked(self) -> None:
        if self._waiters:
            self.cond.notify_all()

    def poison_arrived(self, src: int, group: int, reason: str) -> None:
        kind, _, message = reason.partition("\n")
        if kind == CollectiveMismatchError.__name__:  # the program's fault, on every rank
            error: BaseException = CollectiveMismatchError(f"rank {src} found that {message}")
        else:
            error = PeerError(f"rank {src} reported a failure in this group: {message}", peer=src)
        with self.lock:
            channel = self._channels.get(group)
            if channel is None:
                self._early_poison.setdefault(group, error)
            elif channel.error is None:
                channel.error = error
            self.cond.notify_all()

    # -- failure of a group -----------------------------------------------------------------
    def break_channel(self, channel: Channel, error: BaseException, notify_peers: bool) -> None:
        with self.lock:
            if channel.error is None:
                channel.error = error
            self.cond.notify_all()
            peers = (
                [p for p in channel.members if p != self.rank and self.peer_state[p] is PeerState.OPEN]
                if notify_peers
                else []
            )
        reason = memoryview(f"{type(error).__name__}\n{error}".encode("utf-8", "replace")[:4096])
        for peer in peers:
            header = pack_header(FrameKind.POISON, channel.group_id, 0, 0, 0, NO_FINGERPRINT, reason.nbytes)
            try:
                self._transmit(SendRequest(peer, header, reason, channel, "poison"))
            except PeerError:
                pass  # that peer is gone too; nothing to tell it

    # -- closing -----------------------------------------------------------------------------
    def begin_close(self) -> bool:
        """Mark the mesh closed and wait for a driving thread to leave; False if already closed."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            self.cond.notify_all()
        self._wake()
        with self.lock:
            while self._driving:
                self._waiters += 1
                try:
                    self.cond.wait(TICK)
                finally:
                    self._waiters -= 1
        return True
