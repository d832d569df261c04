"""A rank's buffers exposed to the others' single-copy reads and writes (cross-memory
attach), through the control words of its shared-memory segment.

Owns: ``ExposedBuffers``, the half of ``shm.ShmDomain`` (a mixin: the domain provides its
rank, size, names, control ``words`` and ``mine``, the liveness ``_check`` and ``cma``/``pids``)
that publishes where a rank's buffer (or blocks) of a round is, reads from and writes into
the others' (``fetch``, ``fetch_block``, ``put``), and takes a buffer back when its call
failed (``withdraw``, ``quiesce``); and the CMA probe's words (``publish_self``,
``cma_works``). Split from ``shm`` (segments, slots, waits) so each stays under 400 lines.
Must not know about collectives.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import PeerError
from .cma import CrossMemory, address_of, probe
from .shm_words import CONTROL_BYTES, DONE, EXPOSED, LIST, LIST_MAX, MAGIC, SELF


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (not gone, not a zombie): one that does not can
    write into nobody's memory any more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


#: How long a rank whose call failed with its buffer open to the others' writes gives them to
#: be out of the round (``quiesce``): they notice the failure within a piece's time.
QUIESCE_SECONDS = 1.0

#: How long a call that found a member's buffer taken back looks for the root cause (another
#: member gone, the group broken) before it names that member: the failure that made it take
#: the buffer back reaches this rank within a link's read.
LEFT_SETTLE_SECONDS = 0.3


class ExposedBuffers:
    """Single-copy access to the ranks' own buffers (see the module docstring)."""

    # What the domain provides (set in ShmDomain.__init__).
    rank: int
    size: int
    names: list[int]
    words: list[memoryview]
    mine: memoryview
    cma: CrossMemory | None
    pids: list[int]
    _check: Callable[[object, list[int]], None]

    def enable_cma(self, pids: Sequence[int]) -> None:
        self.cma, self.pids = CrossMemory(), list(pids)

    def expose(self, round_: int, array: np.ndarray) -> None:
        """Publish where this rank's buffer for ``round_`` is, for the others to read."""
        self.mine[EXPOSED + (round_ & 1)] = address_of(array)

    def fetch(self, rank: int, round_: int, offset: int, dst: np.ndarray) -> None:
        """Read ``dst.nbytes`` bytes at ``offset`` of ``rank``'s exposed buffer into ``dst``."""
        assert self.cma is not None
        if dst.nbytes:
            self.cma.read(self.pids[rank], self.words[rank][EXPOSED + (round_ & 1)] + offset, dst)

    def put(self, rank: int, round_: int, offset: int, src: np.ndarray) -> None:
        """Write ``src`` at ``offset`` of ``rank``'s exposed buffer; PeerError if ``rank``
        took it back (``withdraw``: its call failed, and it may use the buffer again)."""
        assert self.cma is not None
        if src.nbytes:
            address = self.words[rank][EXPOSED + (round_ & 1)]
            if not address:
                raise PeerError(f"rank {self.names[rank]} took its buffer back", peer=self.names[rank])
            self.cma.write(self.pids[rank], address + offset, src)

    def withdrawn(self, rank: int, round_: int) -> bool:
        """Whether ``rank`` took its buffer of ``round_`` back (``withdraw``)."""
        return not self.words[rank][EXPOSED + (round_ & 1)]

    def left(self, rank: int, what: object, settle: float = LEFT_SETTLE_SECONDS) -> Exception:
        """The error for a call that found ``rank``'s buffer taken back (its own call of it
        failed): what failed that call, as a slow wait finds it (a peer gone, the group
        broken), else that ``rank`` left it. ``rank``'s call usually failed because another
        member died or the group broke, which this rank may not have seen yet: it looks at
        every member, for up to ``settle`` seconds, before it blames ``rank``."""
        name = self.names[rank]
        others = [self.names[r] for r in range(self.size) if r != self.rank]
        give_up = time.monotonic() + settle
        while True:
            try:
                self._check(what, others)
            except Exception as exc:  # noqa: BLE001 — the root cause, returned to be raised
                return exc
            if time.monotonic() >= give_up:
                return PeerError(f"{what}: rank {name} left this call (its own call failed)", peer=name)
            time.sleep(0.001)

    def withdraw(self, round_: int) -> None:
        """Take this rank's buffer of ``round_`` back: the others' ``put`` into it fails."""
        self.mine[EXPOSED + (round_ & 1)] = 0

    def quiesce(self, round_: int, seconds: float = QUIESCE_SECONDS) -> None:
        """After this rank's call of ``round_`` failed with its buffer open to the others'
        writes: take the buffer back (``withdraw``: their writes into it fail from now on),
        and give the others up to ``seconds`` to be out of the round — done with it, or
        having taken their own buffer back (their call failed too: one that finds this
        buffer taken back fails), or dead — so that no write of theirs that already started
        lands in the buffer after the caller has it again. It does not say done: a rank
        waiting for this one's done must not take a failed call for a finished one. Never
        raises: the call's own error is what the caller gets."""
        self.withdraw(round_)
        words, at = self.words, EXPOSED + (round_ & 1)
        lagging = [r for r in range(self.size) if r != self.rank]
        give_up = time.monotonic() + seconds
        while lagging and time.monotonic() < give_up:
            lagging = [
                r for r in lagging if words[r][DONE] < round_ and words[r][at] and _alive(self.pids[r])
            ]
            if lagging:
                time.sleep(0.0002)

    def expose_blocks(self, round_: int, blocks: Sequence[np.ndarray]) -> None:
        """Publish where each of ``blocks`` (at most LIST_MAX) is and how many bytes it holds."""
        base = LIST + (round_ & 1) * 2 * LIST_MAX
        mine = self.mine
        for i, block in enumerate(blocks):
            mine[base + i] = address_of(block)
            mine[base + LIST_MAX + i] = block.nbytes

    def block_size(self, rank: int, round_: int, index: int) -> int:
        """How many bytes ``rank`` exposed as block ``index`` for ``round_``."""
        return self.words[rank][LIST + (round_ & 1) * 2 * LIST_MAX + LIST_MAX + index]

    def fetch_block(self, rank: int, round_: int, index: int, dst: np.ndarray, offset: int = 0) -> None:
        """Read ``dst.nbytes`` bytes at ``offset`` of ``rank``'s exposed block ``index`` into ``dst``."""
        assert self.cma is not None
        if dst.nbytes:
            address = self.words[rank][LIST + (round_ & 1) * 2 * LIST_MAX + index]
            self.cma.read(self.pids[rank], address + offset, dst)


def publish_self(segment: Any) -> None:
    """Write the segment's own address, pid and magic, for the others' CMA probe."""
    words = memoryview(segment.mmap)[:CONTROL_BYTES].cast("q")
    words[SELF] = address_of(np.frombuffer(segment.mmap, np.uint8, 8))
    words[SELF + 1] = os.getpid()
    words[SELF + 2] = MAGIC
    words.release()


def cma_works(segment: Any) -> bool:
    """Whether this process may read the owner of ``segment``'s memory directly."""
    words = memoryview(segment.mmap)[:CONTROL_BYTES].cast("q")
    address, pid, magic = words[SELF], words[SELF + 1], words[SELF + 2]
    words.release()
    return (
        bool(address) and magic == MAGIC and probe(pid, address + 8 * (SELF + 2), MAGIC.to_bytes(8, "little"))
    )
