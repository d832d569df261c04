"""The interface a shared-memory algorithm sees: its slot, the others' slots, and rounds.

Owns: the ``Slots`` protocol. A shared-memory algorithm works in *rounds*: ``begin()`` returns
the next round number once this rank's slot for it is free (double buffering: round k uses
slot k % 2, free once every rank finished round k-2), the rank writes its slot, says
``ready``, waits for the others' ``ready``, reads their slots, and says ``done``. Two-phase
algorithms add ``reduced``. Round numbers are never reset and every rank runs the same rounds
(they depend only on arguments all ranks agree on, which the fingerprint checks).

Must not know about segments, files or sockets: ``group`` adapts a transport ShmDomain to it.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ..config import Tunables


class Slots(Protocol):
    rank: int
    size: int
    slot_bytes: int
    tunables: Tunables

    def begin(self) -> int:
        """Start the next round; return its number once this rank's slot for it is free."""
        ...

    def slot(self, rank: int, round_: int) -> np.ndarray:
        """``rank``'s slot for ``round_`` as bytes (``slot_bytes`` long)."""
        ...

    def views(self, round_: int, nbytes: int, dtype: np.dtype) -> list[np.ndarray]:
        """Every rank's slot for ``round_``: its first ``nbytes`` as ``dtype`` (cached views)."""
        ...

    def ready(self, round_: int) -> None:
        """This rank's data for ``round_`` is in its slot."""
        ...

    def wait_ready(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        """Wait until ``ranks`` (default: all others) are ready; their fingerprints are checked."""
        ...

    def reduced(self, round_: int) -> None:
        ...

    def wait_reduced(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        ...

    def done(self, round_: int) -> None:
        """This rank has finished reading the others' slots of ``round_``."""
        ...

    def wait_done(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        """Wait until ``ranks`` (default: all others) have finished ``round_``."""
        ...

    # Single-copy reads of a peer's buffer (``can_fetch``: the kernel allows it for this group).
    can_fetch: bool

    def expose(self, round_: int, array: np.ndarray) -> None:
        """Let the others read ``array`` (contiguous) during ``round_``; it must not change
        until they are done with it (``wait_done``)."""
        ...

    def fetch(self, rank: int, round_: int, offset: int, dst: np.ndarray) -> None:
        """Copy ``dst.nbytes`` bytes from ``rank``'s exposed array, at byte ``offset``."""
        ...

    def expose_blocks(self, round_: int, blocks: Sequence[np.ndarray]) -> None:
        """Let the others read each of ``blocks`` (at most 96) during ``round_``."""
        ...

    def fetch_block(self, rank: int, round_: int, index: int, dst: np.ndarray, offset: int = 0,
                    whole: int | None = None) -> None:
        """Copy ``rank``'s exposed block ``index`` into ``dst`` (or ``dst.nbytes`` of it from
        byte ``offset``); CollectiveMismatchError if the block is not ``whole`` (default
        ``dst.nbytes``) bytes long."""
        ...

    def scratch(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray:
        ...


def typed(raw: np.ndarray, nbytes: int, dtype: np.dtype) -> np.ndarray:
    """The first ``nbytes`` of a byte slot, viewed as ``dtype``."""
    return raw[:nbytes].view(dtype)
