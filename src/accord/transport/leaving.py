"""What a rank that leaves says, and what the others make of it: GOODBYE and LEAVE.

Owns: ``Leaving``, a part of ``Mesh``. A rank that destroys one group tells that group's other
members at once (LEAVE: the last call it ended there); a rank that leaves the whole mesh says
GOODBYE with that figure for every group it had. A member whose call waits for a leaver in a
group it left before that call raises at once (``_check_leavers`` for message waits,
``left_error`` for shared-memory ones), and a receive from it there that is still unmatched
fails (frames on a link arrive in order, so whatever it sent has arrived). A link that ends
(``peer_lost``) is such a goodbye, or a death that fails every group the peer is in. Must not
know about algorithms or process groups.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import PeerError
from .channel import PeerState
from .matching import Matcher, SendRequest
from .wire import NO_FINGERPRINT, FrameKind, pack_header

if TYPE_CHECKING:
    from .channel import Channel

GOODBYE_ITEM = struct.Struct("<IQ")  # GOODBYE payload: (group id, last call ended there)
_GONE = (PeerState.DEAD, PeerState.LEFT)  # (not MOVED: see ``gone``)
#: A GOODBYE item that is no group's: the leaver goes on in the job's next world (it is
#: moving, not lost; ``Mesh.moving``). Group ids are 32-bit hashes: this one is reserved.
MOVING_ITEM = GOODBYE_ITEM.pack(0xFFFFFFFF, 0x4D4F56494E47)  # (b"MOVING")
_LEAVE_PAYLOAD = struct.Struct("<Q")  # LEAVE payload: the last call ended in the group


class Leaving:
    """The leaving half of ``Mesh`` (which provides the attributes used here)."""

    lock: threading.Lock
    cond: threading.Condition
    rank: int
    closed: bool
    leaving: bool
    moving: bool
    matcher: Matcher
    peer_state: list[PeerState]
    ended: dict[int, int]
    left_after: dict[int, dict[int, int]]
    left_groups: dict[int, dict[int, int]]
    peer_error: dict[int, PeerError]
    _channels: dict[int, Channel]

    def _transmit(self, req: SendRequest) -> None:
        raise NotImplementedError

    def _gone_error(self, peer: int, context: Any) -> PeerError:
        raise NotImplementedError

    def break_channel(self, channel: Channel, error: BaseException, notify_peers: bool) -> None:
        raise NotImplementedError

    def peer_lost(self, peer: int, error: PeerError | None, goodbye: bytes = b"") -> None:
        """The link to ``peer`` ended: ``error`` None means an orderly GOODBYE (whose payload
        says the last call the peer ended on each group)."""
        with self.lock:
            if self.peer_state[peer] is not PeerState.OPEN:
                return
            if error is None:
                usable = len(goodbye) - len(goodbye) % GOODBYE_ITEM.size
                items = [goodbye[at : at + GOODBYE_ITEM.size] for at in range(0, usable, GOODBYE_ITEM.size)]
                moving = MOVING_ITEM in items
                self.peer_state[peer] = PeerState.MOVED if moving else PeerState.LEFT
                ended = (GOODBYE_ITEM.unpack(item) for item in items if item != MOVING_ITEM)
                self.left_after[peer] = dict(ended)
            else:
                self.peer_state[peer] = PeerState.DEAD
                self.peer_error[peer] = error
                for channel in self._channels.values():
                    if peer in channel.members and channel.error is None:
                        channel.error = error
            for req in self.matcher.posted_requests():
                if req.src == peer and not req.claimed:
                    self.matcher.cancel(req)
                    req.error, req.done = self._gone_error(peer, req.context), True
            self.cond.notify_all()

    def close_channel(self, channel: Channel, ended: int | None = None, tell_peers: bool = True) -> None:
        """Detach ``channel`` (its group was destroyed here); ``ended`` is the last call of
        the group that ended here. The group's other members are told at once (LEAVE), so a
        call of theirs that waits for this rank in the group raises now instead of at its
        timeout; GOODBYE repeats it for every group when the mesh closes."""
        with self.lock:
            self._channels.pop(channel.group_id, None)
            last = ended if ended is not None else max(channel.history, default=0)
            self.ended[channel.group_id] = last
            peers = (
                []
                if self.closed or self.leaving or not tell_peers
                else [p for p in channel.members if p != self.rank and self.peer_state[p] is PeerState.OPEN]
            )
        payload = memoryview(_LEAVE_PAYLOAD.pack(last))
        for peer in peers:
            header = pack_header(FrameKind.LEAVE, channel.group_id, 0, 0, 0, NO_FINGERPRINT, payload.nbytes)
            try:
                self._transmit(SendRequest(peer, header, payload, channel, "leave"))
            except PeerError:
                pass  # that peer is gone: nothing to tell it

    def group_left(self, peer: int, group: int, payload: bytes) -> None:
        """``peer`` destroyed ``group`` after ending call ``payload`` there (LEAVE). Frames
        on a link arrive in order, so whatever it sent in that group has arrived: a receive
        from it there that is still unmatched can never complete, and fails now."""
        if len(payload) != _LEAVE_PAYLOAD.size:
            return  # not from this version of accord: ignore rather than guess
        (ended,) = _LEAVE_PAYLOAD.unpack(payload)
        gid = group & 0xFFFFFFFF
        with self.lock:
            self.left_groups.setdefault(peer, {})[gid] = ended
            for req in self.matcher.posted_requests():
                if req.src == peer and not req.claimed and req.channel.group_id & 0xFFFFFFFF == gid:
                    self.matcher.cancel(req)
                    req.error, req.done = self._left_error(peer, gid, ended, req.context), True
            self.cond.notify_all()

    def left_error(self, channel: Channel, peers: Sequence[int], context: Any) -> PeerError | None:
        """The error to raise if any of ``peers`` destroyed ``channel``'s group (LEAVE), else
        None: a call that still waits for it there can never complete."""
        gid = channel.group_id & 0xFFFFFFFF
        for peer in peers:
            ended = self.left_groups.get(peer, {}).get(gid)
            if ended is not None:
                return self._left_error(peer, gid, ended, context)
        return None

    def gone(self, among: Sequence[int]) -> list[int]:
        """The peers of ``among`` that died or left the job (in rank order): what this rank
        has seen go; not those that moved on to the job's next world with it (``moving``)."""
        with self.lock:
            return [peer for peer in among if self.peer_state[peer] in _GONE]

    @staticmethod
    def _moved_error(peer: int, context: Any, after: str) -> PeerError:
        """A peer that moved on to the job's next world (a survivor that shrank or grew
        before this rank saw the loss): a rank was lost, not this one."""
        return PeerError(
            f"{context}: rank {peer} moved on to the job's next world (shrink_group or "
            f"grow_group){after}: a rank of the job was lost (lost_ranks() names it once this "
            f"rank has seen it go)",
            peer=peer,
        )

    def _left_error(self, peer: int, gid: int, ended: int, context: Any) -> PeerError:
        if self.peer_state[peer] is PeerState.MOVED:
            return self._moved_error(peer, context, f" after call #{ended} of this group")
        return PeerError(
            f"{context}: rank {peer} has left this group (destroy_process_group or exit) after "
            f"call #{ended} of it, so this call can never complete. Did every rank call the same "
            f"collectives before leaving?",
            peer=peer,
        )

    def goodbye_payload(self) -> bytes:
        """GOODBYE's payload: (group id, last call ended here) for every group this rank had."""
        with self.lock:
            ended = dict(self.ended)
            for gid, channel in self._channels.items():
                ended.setdefault(gid, max(channel.history, default=0))
        payload = b"".join(GOODBYE_ITEM.pack(gid & 0xFFFFFFFF, seq) for gid, seq in ended.items())
        return payload + MOVING_ITEM if self.moving else payload

    def channel_closed(self, channel: Channel) -> bool:
        """Whether ``channel``'s group was shut down (destroyed) on this rank."""
        return self._channels.get(channel.group_id) is not channel

    def _check_leavers(self, channel: Channel, context: Any) -> None:
        """Raise if a member that left (GOODBYE) ended its part of this group before the
        call running here: that call can never complete."""
        running, gid = max(channel.running), channel.group_id & 0xFFFFFFFF
        left = [(peer, after.get(gid, 0)) for peer, after in list(self.left_after.items())]
        left += [(peer, after[gid]) for peer, after in list(self.left_groups.items()) if gid in after]
        for peer, ended in left:
            if peer in channel.members and ended < running:
                error = self._left_error(peer, gid, ended, context)
                dead = [p for p in channel.members if self.peer_state[p] is PeerState.DEAD]
                if dead and self.peer_state[peer] is PeerState.MOVED:  # the root cause first
                    error = self._gone_error(dead[0], context)
                self.break_channel(channel, error, notify_peers=True)
                raise error
