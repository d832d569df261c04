"""Which rank a shared-memory call blames when it finds a member's buffer taken back
(transport/shm_exposed.ExposedBuffers.left): the member took it back because its own call
failed, usually since another member died. The survivor names the dead member, not the one
that merely left the call first (the chaos test once saw rank 0 blamed for rank 1's death)."""

from __future__ import annotations

import time

from accord.errors import PeerError
from accord.transport.shm_exposed import ExposedBuffers


class _Domain(ExposedBuffers):
    """Four members; this is member 2; the liveness check finds ``dead`` gone from its
    ``finds_after``-th look on."""

    def __init__(self, dead: int | None, finds_after: int) -> None:
        self.rank, self.size, self.names = 2, 4, [10, 11, 12, 13]
        self.looks: list[list[int]] = []
        self.dead, self.finds_after = dead, finds_after

    def _check(self, what: object, lagging: list[int]) -> None:
        self.looks.append(list(lagging))
        if self.dead is not None and len(self.looks) >= self.finds_after and self.dead in lagging:
            raise PeerError(f"{what}: rank {self.dead} died", peer=self.dead)


def test_the_member_that_died_is_named_once_the_check_sees_it() -> None:
    domain = _Domain(dead=11, finds_after=5)
    error = domain.left(0, "all_reduce", settle=5.0)
    assert isinstance(error, PeerError) and error.peer == 11 and "rank 11 died" in str(error)
    assert domain.looks[0] == [10, 11, 13]  # every other member, not only the one that left


def test_the_member_that_left_is_named_when_nothing_else_is_found() -> None:
    domain = _Domain(dead=None, finds_after=0)
    start = time.monotonic()
    error = domain.left(0, "all_reduce", settle=0.05)
    assert 0.05 <= time.monotonic() - start < 2.0
    assert isinstance(error, PeerError) and error.peer == 10
    assert "rank 10 left this call (its own call failed)" in str(error)
