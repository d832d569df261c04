"""The liveness check of a shared-memory group's slow waits: what a wait that found a peer
not there yet calls now and then (``transport.shm.ShmDomain``'s ``check``).

Owns: ``checker`` — raise if the group was destroyed or broke (the channel's error), or a
member waited for died or left; a member that left is blamed only after the links were read
for a death behind it (``_SETTLE_S``). Split from ``shared_memory`` (set-up and
``CallSlots``) so each stays under 400 lines. Must not know about collectives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..errors import PeerError, with_context
from ..transport.channel import PeerState
from ..transport.mesh import Channel, Mesh
from ..transport.shm_exposed import LEFT_SETTLE_SECONDS, QUIESCE_SECONDS


def checker(mesh: Mesh, channel: Channel) -> Callable[[object, list[int]], None]:
    """What a slow wait calls now and then: raise if the group broke or a peer waited for left."""

    def check(what: object, lagging: list[int]) -> None:
        if mesh.closed or mesh.channel_closed(channel):
            raise PeerError(f"{what}: the process group was destroyed while this call waited")
        mesh.poll_nowait()
        if channel.error is not None:
            raise with_context(channel.error, what)
        gone = mesh.gone_error(lagging, what) or mesh.left_error(channel, lagging, what)
        if gone is not None and not _died(mesh, channel.members):
            # A member that left may have left because another one died (its own call
            # failed first): read what the links still hold before blaming the leaver.
            mesh.drive_until(lambda: channel.error is not None or _died(mesh, channel.members), _SETTLE_S)
            if channel.error is not None:
                raise with_context(channel.error, what)
            gone = mesh.gone_error(lagging, what) or mesh.left_error(channel, lagging, what) or gone
        if gone is not None:
            raise gone

    return check


#: How long a wait that found a member gone reads the links for the root cause first.
_SETTLE_S = 0.25
# A call that found a member's buffer taken back looks for the root cause (ExposedBuffers.left,
# then this settle) while its own buffer stays exposed: the member that took its buffer back
# waits that long for it in ``quiesce``, which must outlast both.
assert LEFT_SETTLE_SECONDS + _SETTLE_S < QUIESCE_SECONDS


def _died(mesh: Mesh, members: Iterable[int]) -> bool:
    return any(mesh.peer_state[peer] is PeerState.DEAD for peer in members)
