"""Channel: one group's view of a mesh, and the state of a peer.

Owns: a group's id (in every header), its members, its failure (which breaks it alone), the
collective calls running on it and the fingerprints of recent finished ones (to explain a
frame that comes late). Must not know about algorithms or process groups.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .matching import Matcher, RecvRequest, SendRequest, match_key
from .wire import Fingerprint, pack_header

if TYPE_CHECKING:
    from ..timeouts import Deadline

Describe = Callable[[Fingerprint, int], str]
#: Finished calls whose fingerprints a channel remembers (to explain a frame that came late).
_HISTORY = 64


class Carrier(Protocol):
    """What a channel asks of the mesh that carries it (transport.mesh.Mesh is one). Declared
    here so that channel.py need not import mesh.py, which imports it."""

    lock: threading.Lock
    matcher: Matcher

    def begin_call(self, channel: Channel, seq: int, fp: Fingerprint, context: Any) -> None: ...

    def post_send(self, req: SendRequest) -> SendRequest: ...

    def post_recv(
        self,
        src: int | None,
        kind: int,
        key: Any,
        buf: memoryview | None,
        expect: Fingerprint | None,
        channel: Channel,
        context: Any,
    ) -> RecvRequest: ...

    def wait(
        self,
        requests: Sequence[SendRequest | RecvRequest],
        deadline: Deadline,
        context: Any,
        channel: Channel,
    ) -> None: ...

    def settle(
        self,
        requests: Sequence[SendRequest | RecvRequest],
        deadline: Deadline,
        context: Any,
        channel: Channel,
    ) -> None: ...

    def break_channel(self, channel: Channel, error: BaseException, notify_peers: bool) -> None: ...


class PeerState(enum.Enum):
    OPEN = "open"
    LEFT = "left"  # said GOODBYE: done with the job, not a failure
    MOVED = "moved"  # said GOODBYE to go on in the job's next world (shrink_group, grow_group)
    DEAD = "dead"  # vanished without GOODBYE


def default_describe(fp: Fingerprint, seq: int) -> str:
    return f"collective #{seq} (op {fp.op}, dtype {fp.dtype}, count {fp.count}, root {fp.root})"


class Channel:
    """One group's traffic on a mesh: its id goes in every header; failures break it alone."""

    def __init__(self, mesh: Carrier, group_id: int, members: Sequence[int], describe: Describe) -> None:
        self.mesh = mesh
        self.group_id = group_id
        self.members = frozenset(members)
        self.describe = describe
        self.error: BaseException | None = None
        #: collective calls in progress: seq → (fingerprint, context), so that a frame of the
        #: same seq with another fingerprint is a mismatch even when no receive matches it
        self.running: dict[int, tuple[Fingerprint, Any]] = {}
        #: the fingerprints of recent finished calls, to describe a late mismatch
        self.history: dict[int, Fingerprint] = {}

    def begin(self, seq: int, fp: Fingerprint, context: Any) -> None:
        """Collective call ``seq`` starts here; frames for it that came early are checked now."""
        self.mesh.begin_call(self, seq, fp, context)

    def end(self, seq: int) -> None:
        done = self.running.pop(seq, None)
        if done is not None:
            self.history[seq] = done[0]
            self.history.pop(seq - _HISTORY, None)

    def isend(
        self,
        dst: int,
        kind: int,
        seq: int,
        step: int,
        tag: int,
        fp: Fingerprint,
        payload: memoryview,
        context: Any,
    ) -> SendRequest:
        header = pack_header(kind, self.group_id, seq, step, tag, fp, payload.nbytes)
        return self.mesh.post_send(SendRequest(dst, header, payload, self, context))

    def irecv(
        self,
        src: int | None,
        kind: int,
        seq: int,
        step: int,
        tag: int,
        expect: Fingerprint | None,
        buf: memoryview | None,
        context: Any,
    ) -> RecvRequest:
        """Post a receive; ``buf`` None takes a message of any size (see RecvRequest)."""
        key = match_key(kind, self.group_id, seq, step, tag)
        return self.mesh.post_recv(src, kind, key, buf, expect, self, context)

    def wait(self, requests: Sequence[SendRequest | RecvRequest], deadline: Deadline, context: Any) -> None:
        self.mesh.wait(requests, deadline, context, self)

    def settle(self, requests: Sequence[SendRequest | RecvRequest], deadline: Deadline, context: Any) -> None:
        """Wait until each request ended, well or not, or the deadline passed (see Waiting.settle)."""
        self.mesh.settle(requests, deadline, context, self)

    def fail(self, error: BaseException, notify_peers: bool) -> None:
        """Break this group here; with notify_peers, tell its live members why (POISON)."""
        self.mesh.break_channel(self, error, notify_peers)

    def cancel(self, req: RecvRequest) -> bool:
        """Withdraw an unmatched receive (after a p2p timeout); False if data is arriving."""
        with self.mesh.lock:
            return self.mesh.matcher.cancel(req)
