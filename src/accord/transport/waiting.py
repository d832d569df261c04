"""The wait loop every mesh shares, and background progress for unwaited requests.

Owns: ``Waiting``, a part of ``Mesh``: one waiting thread drives the transport's I/O at a
time while the others sleep on the mesh's Condition; every wait ends in a result, the group's
error, a destroyed mesh, a peer that left before the call could complete, or a timeout that
names who sent nothing; ``settle`` waits the same way but leaves it to the caller to judge
each request. Must not know about algorithms or process groups.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DistTimeoutError, PeerError, with_context
from ..timeouts import Deadline, format_seconds
from .channel import PeerState
from .matching import RecvRequest, SendRequest
from .wire import FrameKind

_KIND_OFFSET = 2  # of the frame kind in a packed header (wire.HEADER: magic, then kind)

if TYPE_CHECKING:
    from .channel import Channel

#: Longest a waiting thread sleeps before it looks at the clock and its requests again.
TICK = 0.5
#: How long a call that a member's leaving failed reads the links for a death behind it
#: (``Waiting._settle_leaver``); only on that failure.
LEFT_SETTLE_SECONDS = 0.25


def _is_p2p(req: SendRequest | RecvRequest) -> bool:
    """A point-to-point message (not a step of a collective)?"""
    kind = req.kind if isinstance(req, RecvRequest) else req.header[_KIND_OFFSET]
    return kind == FrameKind.P2P


class Waiting:
    """The waiting half of ``Mesh`` (which provides the attributes used here)."""

    lock: threading.Lock
    cond: threading.Condition
    needs_driver: bool
    closed: bool
    rank: int
    peer_state: list[PeerState]
    left_after: dict[int, dict[int, int]]
    left_groups: dict[int, dict[int, int]]
    _check_leavers: Callable[[Channel, Any], None]  # in ``leaving``
    _driving: bool
    _waiters: int
    _watched: list[tuple[SendRequest | RecvRequest, Callable[[], None] | None]]
    _progress_thread: threading.Thread | None

    def _drive(self, timeout: float) -> None:
        raise NotImplementedError

    def _notify_locked(self) -> None:
        raise NotImplementedError

    def break_channel(self, channel: Channel, error: BaseException, notify_peers: bool) -> None:
        raise NotImplementedError

    def drive_until(self, done: Callable[[], bool], seconds: float) -> None:
        """Drive the links (or let the thread that drives do it) until ``done()`` or for
        ``seconds``: I/O that no waiting call would read (a peer's closed connection)."""
        deadline = time.monotonic() + seconds
        while not done() and not self.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with self.lock:
                drive = self.needs_driver and not self._driving
                if drive:
                    self._driving = True
                else:  # another thread drives (or nothing needs to): wait for its news
                    self.cond.wait(min(remaining, 0.05))
                    continue
            try:
                self._drive(min(remaining, 0.05))
            finally:
                with self.lock:
                    self._driving = False
                    self._notify_locked()

    def wait(
        self,
        requests: Sequence[SendRequest | RecvRequest],
        deadline: Deadline,
        context: Any,
        channel: Channel,
    ) -> None:
        """Block until every request is done; raise the first error, a broken group, or a timeout.

        One waiting thread at a time drives the transport; the others sleep on the Condition
        and are woken when a request completes or the driver steps down.
        """
        while True:
            for req in requests:
                if not req.done:
                    break
            else:
                for req in requests:
                    if req.error is not None:
                        # a broken group is the root cause of the requests' errors (a peer that
                        # left because it failed first, say): name it rather than the symptom
                        self._settle_leaver(req.error, channel)
                        raise with_context(channel.error or req.error, context)
                return
            if channel.error is not None:
                raise with_context(channel.error, context)
            if self.closed:
                raise PeerError(f"{context}: the process group was destroyed while this call waited")
            if (self.left_after or self.left_groups) and channel.running:
                self._check_leavers(channel, context)
            remaining = deadline.remaining()
            if remaining <= 0:
                raise self._timeout_error(requests, deadline, context)
            self._step(requests, channel, remaining)

    def _settle_leaver(self, error: BaseException, channel: Channel) -> None:
        """``error`` blames a member that left (the group or the job): a survivor leaves because its own call
        failed, often since another member died, and the link of the dead one may end a
        moment after the leaver's goodbye arrived. Read the links for up to
        ``LEFT_SETTLE_SECONDS`` for that death (it breaks the group: ``channel.error``), so
        the caller names the root cause rather than the leaver."""
        peer = getattr(error, "peer", None)
        if channel.error is not None or peer is None or self.peer_state[peer] is PeerState.DEAD:
            return  # (a leaver of this group only is still OPEN: its goodbye comes later)
        members = channel.members
        self.drive_until(
            lambda: channel.error is not None or any(self.peer_state[p] is PeerState.DEAD for p in members),
            LEFT_SETTLE_SECONDS,
        )

    def settle(
        self,
        requests: Sequence[SendRequest | RecvRequest],
        deadline: Deadline,
        context: Any,
        channel: Channel,
    ) -> None:
        """Block until every request has ended, well or not, or the deadline passed; the caller
        looks at each request (``done``, ``error``) to see which.

        Unlike ``wait``, neither a request's error (a receive from a peer that left ends with
        a PeerError naming it) nor a member that left nor the deadline raises here: for calls
        that must account for every peer (monitored_barrier names all the missing ranks).
        The group's own failure and a destroyed mesh still raise.
        """
        while True:
            if channel.error is not None:  # checked first: the root cause of requests' errors
                raise with_context(channel.error, context)
            if all(req.done for req in requests):
                return
            if self.closed:
                raise PeerError(f"{context}: the process group was destroyed while this call waited")
            remaining = deadline.remaining()
            if remaining <= 0:
                return
            self._step(requests, channel, remaining)

    def _step(
        self, requests: Sequence[SendRequest | RecvRequest], channel: Channel, remaining: float
    ) -> None:
        """Drive the transport for a tick if nobody else does, else sleep until woken."""
        with self.lock:
            drive = self.needs_driver and not self._driving
            if drive:
                self._driving = True
            else:
                self._sleep(requests, channel, min(remaining, TICK))
        if drive:
            try:
                self._drive(min(remaining, TICK))
            finally:
                with self.lock:
                    self._driving = False
                    self._notify_locked()

    def _sleep(self, requests: Sequence[SendRequest | RecvRequest], channel: Channel, timeout: float) -> None:
        """Wait on the Condition unless something already changed (lock held)."""
        self._waiters += 1
        try:
            if channel.error is None and not self.closed and any(not r.done for r in requests):
                self.cond.wait(timeout)
        finally:
            self._waiters -= 1

    def _timeout_error(
        self, requests: Iterable[SendRequest | RecvRequest], deadline: Deadline, context: Any
    ) -> DistTimeoutError:
        waiting = sorted(
            {r.src for r in requests if isinstance(r, RecvRequest) and not r.done and r.src is not None}
        )
        stuck = sorted({r.dst for r in requests if isinstance(r, SendRequest) and not r.done})
        parts = []
        if waiting:
            parts.append(f"nothing from rank {', '.join(map(str, waiting))}")
        if any(isinstance(r, RecvRequest) and not r.done and r.src is None for r in requests):
            parts.append("nothing from any rank")
        if stuck:
            parts.append(f"rank {', '.join(map(str, stuck))} did not take the data sent to it")
        suspects = ", ".join(map(str, waiting or stuck)) or "each peer"
        if all(_is_p2p(r) for r in requests):
            side = "send" if waiting or not stuck else "receive"
            hint = f"did it post the matching {side}, with the same tag?"
        else:
            hint = "did every rank call the same collectives in the same order?"
        return DistTimeoutError(
            f"{context}: Timed out after {format_seconds(deadline.budget)}: "
            f"{'; '.join(parts) or 'no progress'}. Is rank {suspects} alive, and {hint}"
        )

    # -- background progress ------------------------------------------------------------------
    def watch(self, req: SendRequest | RecvRequest, on_done: Callable[[], None] | None = None) -> None:
        """Keep ``req`` moving even while nobody waits for it (isend/irecv, then compute), and
        call ``on_done()`` (from the progress thread) once it is done, if given.

        A progress thread (started on first use) drives the transport while watched requests
        are pending; blocking calls still drive it themselves when it is idle. Transports that
        need no driver get the thread only to call ``on_done``.
        """
        if req.done:
            if on_done is not None:
                on_done()
            return
        if not self.needs_driver and on_done is None:
            return
        with self.lock:
            self._watched.append((req, on_done))
            if self._progress_thread is None:
                self._progress_thread = threading.Thread(
                    target=self._progress_loop, name=f"accord-progress-{self.rank}", daemon=True
                )
                self._progress_thread.start()
            self.cond.notify_all()

    def _progress_loop(self) -> None:
        while True:
            with self.lock:
                finished = [cb for req, cb in self._watched if req.done and cb is not None]
                self._watched = [item for item in self._watched if not item[0].done]
                closed = self.closed
                idle = not self._watched or self._driving or not self.needs_driver
            for callback in finished:
                _call(callback)
            if closed:
                return
            if finished:
                continue
            with self.lock:
                if idle or self._driving:
                    self._waiters += 1
                    try:
                        self.cond.wait(TICK)
                    finally:
                        self._waiters -= 1
                    continue
                self._driving = True
            try:
                self._drive(TICK)
            finally:
                with self.lock:
                    self._driving = False
                    self._notify_locked()


def _call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a completion callback must not stop the progress thread
        logging.getLogger("accord").exception("a completion callback raised")
