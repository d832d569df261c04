"""The interfaces a shared-memory algorithm sees: its slot, the others' slots, and rounds.

Owns: the ``Slots`` protocol, and ``Round``, the narrower one a compiled one-round body sees
(below), with the two helpers those bodies share (``others``, ``fold``). A shared-memory
algorithm works in *rounds*: ``begin()`` returns the next round number once this rank's slot
for it is free (double buffering: round k uses slot k % 2, free once every rank finished round
k-2), the rank writes its slot, says
``ready``, waits for the others' ``ready``, reads their slots, and says ``done``. Two-phase
algorithms add ``reduced``. Round numbers are never reset and every rank runs the same rounds
(they depend only on arguments all ranks agree on, which the fingerprint checks).

Must not know about segments, files or sockets: ``group`` adapts a transport ShmDomain to
both (``shared_memory.CallSlots`` is a ``Slots``, ``one_round.Round`` a ``Round``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

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

    def reduced(self, round_: int) -> None: ...

    def wait_reduced(self, round_: int, ranks: Sequence[int] | None = None) -> None: ...

    def done(self, round_: int) -> None:
        """This rank has finished reading the others' slots of ``round_``."""
        ...

    def leave(self, round_: int) -> None:
        """Instead of ``wait_ready`` and ``done``, for a root that only wrote its slot
        (broadcast, scatter: it reads nothing): leave ``round_`` without waiting for the
        others. This rank's next ``begin`` first waits until every rank reached ``round_``,
        checks their fingerprints against this call's (CollectiveMismatchError naming it)
        and only then says done: nobody reuses the slot before."""
        ...

    def wait_done(self, round_: int, ranks: Sequence[int] | None = None) -> None:
        """Wait until ``ranks`` (default: all others) have finished ``round_``."""
        ...

    # Single-copy reads of a peer's buffer.
    @property
    def can_fetch(self) -> bool:
        """The kernel allows them for this group."""
        ...

    def expose(self, round_: int, array: np.ndarray) -> None:
        """Let the others read ``array`` (contiguous) during ``round_``; it must not change
        until they are done with it (``wait_done``)."""
        ...

    def fetch(self, rank: int, round_: int, offset: int, dst: np.ndarray) -> None:
        """Copy ``dst.nbytes`` bytes from ``rank``'s exposed array, at byte ``offset``."""
        ...

    def put(self, rank: int, round_: int, offset: int, src: np.ndarray) -> None:
        """Copy ``src`` into ``rank``'s exposed array, at byte ``offset`` (a range of it that
        ``rank`` leaves alone until this rank is done); PeerError once ``rank``'s call
        failed and it took the array back."""
        ...

    def quiesce(self, round_: int) -> None:
        """This rank's call failed in ``round_`` while the others may write into its exposed
        array: take the array back and let them be out of the round (briefly) before
        returning. It does not say done."""
        ...

    def expose_blocks(self, round_: int, blocks: Sequence[np.ndarray]) -> None:
        """Let the others read each of ``blocks`` (at most 96) during ``round_``."""
        ...

    def fetch_block(
        self, rank: int, round_: int, index: int, dst: np.ndarray, offset: int = 0, whole: int | None = None
    ) -> None:
        """Copy ``rank``'s exposed block ``index`` into ``dst`` (or ``dst.nbytes`` of it from
        byte ``offset``); CollectiveMismatchError if the block is not ``whole`` (default
        ``dst.nbytes``) bytes long."""
        ...

    def scratch(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray: ...


def typed(raw: np.ndarray, nbytes: int, dtype: np.dtype) -> np.ndarray:
    """The first ``nbytes`` of a byte slot, viewed as ``dtype``."""
    return raw[:nbytes].view(dtype)


# -- one-round bodies -------------------------------------------------------------------------
#: body(k, h, seq, parity, *args): one round of a compiled call, after ``begin`` (k: the
#: round, h: its fingerprint hash, seq: the call number, parity: k & 1, the slot in use).
Body = Callable[..., None]
ROOT = (0,)  # the ranks a call reduced by rank 0 waits for
#: a reduction's last step (``Kernel.finalize``: AVG divides by n); None where it has none
Finalize = Callable[[np.ndarray, int], None] | None


class Round(Protocol):
    """What a compiled one-round body sees: the control words themselves, not calls.

    A small call's time is Python's, so the fast form of a schedule's one-slot case
    (``<schedule>_round`` beside each schedule in ``shm``, ``shm_rooted``, ``shm_exchange``)
    is a factory ``make(round) -> body`` run once per call signature: ``make`` copies what it
    uses into locals (the word arrays, the word indices, views of both parities' slots) and
    the body writes ``mine[ready] = k`` itself, where a ``Slots`` schedule calls
    ``slots.ready(k)``. The words, their order and the slot layout are those of the
    schedule's one-slot case over ``Slots``, so a rank on either form meets the other in the
    same round. ``group.one_round`` implements it and runs the rest of the call (the call
    number, ``begin``, the flight recorder, failures).

    Why two forms, side by side, and not one function: the ``Slots`` form serves every call
    that is not compiled (arguments the short path does not take, a kernel without a ufunc,
    an async call still running, torch's profiler recording) and builds nothing per call
    signature; the compiled form is built once per signature so that a call is a few local
    stores and copies. Running the body on the long path would make (or look up) a body per
    call; writing the body over ``Slots`` would pay a method call per word, which is what
    compiling saves. So each module writes a one-round case twice, in adjacent functions,
    and tests/test_one_round.py runs a compiled rank beside ranks on the long path.
    """

    #: this rank's control words, and every rank's (``words[r]``: a first look before ``wait``)
    mine: np.ndarray
    words: Sequence[np.ndarray]
    #: the indices of the words in ``mine`` / ``words[r]``: ready, done and reduced hold the
    #: last round a rank reached; ``fp + parity`` the fingerprint hash of the round in a slot
    READY: int
    DONE: int
    REDUCED: int
    FP: int

    def wait(self, ranks: Sequence[int], k: int, h: int, seq: int) -> None:
        """Until ``ranks`` are ready for round ``k``, their fingerprint hashes checked against
        ``h`` (CollectiveMismatchError naming both calls)."""
        ...

    def reduced_wait(self, k: int, seq: int) -> None:
        """Until rank 0 has said ``reduced`` for round ``k`` (the slow way: it had not yet)."""
        ...

    def leave(self, k: int, h: int, seq: int) -> None:
        """``Slots.leave`` for round ``k`` of call ``seq`` (fingerprint hash ``h``)."""
        ...

    def views(self, nbytes: int, dtype: np.dtype) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every rank's slot, its first ``nbytes`` as ``dtype``: for parity 0 and parity 1."""
        ...

    def bound(self, seq: int) -> Slots:
        """Call ``seq``'s ``Slots`` (for an error message that names the call)."""
        ...


def others(me: int, n: int) -> tuple[int, ...]:
    """The group's ranks but ``me`` (``n``: the group's size)."""
    return tuple(r for r in range(n) if r != me)


def fold(ufunc: Any, n: int) -> Callable[[list[np.ndarray], np.ndarray], None]:
    """out = ((v0 ∘ v1) ∘ v2) ∘ … in rank order, as ``Kernel.combine`` does it."""
    rest = range(2, n)

    def fold_(views: list[np.ndarray], out: np.ndarray) -> None:
        ufunc(views[0], views[1], out=out)
        for r in rest:
            ufunc(out, views[r], out=out)

    return fold_
