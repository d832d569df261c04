"""The round a root left without waiting (``CallSlots.leave``: the root of a one-round
broadcast or scatter reads nothing, so it returns once its slot is written): its check at
the root's next round, and at the group's close.

Owns: ``settle`` — wait until every other rank reached the left round, compare their
fingerprint words for its parity with the left call's hash (CollectiveMismatchError naming
that call), then write this rank's DONE for it (nobody reuses the slot before; the others'
words of that parity cannot change before it either); and ``check_at_close``, the same
check without waiting, a mismatch logged. Split from ``shared_memory`` (``CallSlots``) so
each stays under 400 lines. Must not know about collectives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import DistError
from ..timeouts import Deadline
from ..transport.shm_words import DONE, FP, READY
from ..transport.wire import Fingerprint

log = logging.getLogger("accord")


class CallSlots(Protocol):
    """What of ``shared_memory.CallSlots`` the checks use (that module imports this one)."""

    #: the round left unchecked: (round, hash, fingerprint, call number)
    left: tuple[int, int, Fingerprint, int] | None
    domain: Any
    others: list[int]

    @property
    def deadline(self) -> Deadline: ...

    def describe(self, fp: Fingerprint, seq: int) -> str: ...

    def mismatch(
        self, rank: int, detail: list[int], fp: Fingerprint | None = None, seq: int | None = None
    ) -> DistError: ...


def settle(slots: CallSlots, call: Callable[[], CallSlots] | None = None) -> None:
    """Check ``slots.left`` (see the module docstring) at the start of this rank's next
    round. ``call``: this call's CallSlots, for a slow wait's deadline and the error's
    context (default: ``slots`` as bound now)."""
    assert slots.left is not None
    k, h, fp, seq = slots.left
    slots.left = None  # (a failure below breaks the group: nothing is left to say done)
    domain, others = slots.domain, slots.others
    words, at = domain.words, FP + (k & 1)
    for r in others:
        if words[r][READY] < k:
            if not domain.quick_wait(READY, k, others):
                now = slots if call is None else call()
                left = now.describe(fp, seq)
                what = f"{now} (waiting for the others to reach {left}, which this rank left as its root)"
                domain.wait_slow(READY, k, others, now.deadline, what)
            break
    for r in others:
        if words[r][at] != h:
            raise (slots if call is None else call()).mismatch(r, domain.fingerprint(r, k), fp, seq)
    domain.mine[DONE] = k


def check_at_close(slots: CallSlots) -> None:
    """The group closes with a round left: check the ranks that reached it, without waiting;
    a mismatch is logged (the group's last call was a broadcast or scatter that another rank
    did not make, and no later call of this rank can raise it)."""
    assert slots.left is not None
    k, h, fp, seq = slots.left
    slots.left = None
    words, at = slots.domain.words, FP + (k & 1)
    wrong = [r for r in slots.others if words[r][READY] >= k and words[r][at] != h]
    if wrong:
        log.warning("%s", slots.mismatch(wrong[0], slots.domain.fingerprint(wrong[0], k), fp, seq))
