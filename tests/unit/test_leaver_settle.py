"""A call that a member's leaving failed looks for a death behind it before it blames the
leaver (``transport.waiting.Waiting._settle_leaver``): a survivor leaves because its own call
failed, and the dead rank's link may end a moment after the leaver's goodbye arrived."""

from __future__ import annotations

from types import SimpleNamespace

from accord.errors import PeerError
from accord.transport.channel import PeerState
from accord.transport.waiting import LEFT_SETTLE_SECONDS, Waiting


class _Mesh(Waiting):
    """The attributes ``_settle_leaver`` reads; ``drive_until`` reads a link that says
    ``dies`` died (None: nothing more arrives)."""

    def __init__(self, dies: int | None) -> None:
        self.peer_state = [PeerState.OPEN] * 4
        self.dies = dies
        self.drives: list[float] = []

    def drive_until(self, done, seconds: float) -> None:  # type: ignore[override]
        self.drives.append(seconds)
        if self.dies is not None:
            self.peer_state[self.dies] = PeerState.DEAD
            self.channel.error = PeerError(f"rank {self.dies} died", peer=self.dies)
        assert done() == (self.dies is not None)


def _channel() -> SimpleNamespace:
    return SimpleNamespace(error=None, members=[0, 1, 2, 3])


def test_a_death_behind_the_leaver_is_found_and_named_instead() -> None:
    mesh, channel = _Mesh(dies=2), _channel()
    mesh.channel = channel
    mesh._settle_leaver(PeerError("rank 3 has left the group", peer=3), channel)
    assert mesh.drives == [LEFT_SETTLE_SECONDS]
    assert channel.error is not None and channel.error.peer == 2  # what the caller raises


def test_without_a_death_the_leaver_is_blamed_after_the_settle() -> None:
    mesh, channel = _Mesh(dies=None), _channel()
    mesh.channel = channel
    mesh._settle_leaver(PeerError("rank 3 has left the group", peer=3), channel)
    assert mesh.drives == [LEFT_SETTLE_SECONDS] and channel.error is None


def test_a_dead_peer_or_a_broken_group_needs_no_settle() -> None:
    mesh, channel = _Mesh(dies=2), _channel()
    mesh.channel = channel
    mesh.peer_state[3] = PeerState.DEAD
    mesh._settle_leaver(PeerError("rank 3 died", peer=3), channel)
    channel.error = PeerError("rank 1 failed", peer=1)
    mesh._settle_leaver(PeerError("rank 3 has left the group", peer=3), channel)
    mesh._settle_leaver(RuntimeError("not a peer's"), _channel())
    assert mesh.drives == []
