"""Shared memory between the ranks of one host: segments, flags, slots, and waiting on them.

Owns: creating, mapping and unlinking the per-rank segments of one group (``ShmDomain``), the
control words in them (never-reset round counters, per-round fingerprint hashes), the two data
slots of each rank (double buffering), and the wait policy that never collapses when ranks
outnumber cores: spin briefly, then ``os.sched_yield()``, then short sleeps — yielding at once
when oversubscribed — checking the deadline, an abort, and the peers' liveness as it goes;
before that loop, ``quick_wait``: a tight spin (a few bare yields when oversubscribed) that
needs no clock and no deadline.
Must not know about collectives: algorithms see it through ``collectives.slots.Slots``.

The layout of one rank's segment (its control words) is ``shm_words``'; the single-copy
reads and writes of the ranks' own buffers are ``shm_exposed``' (``ExposedBuffers``, a mixin
of ``ShmDomain``).

Memory ordering: data is written with NumPy stores, then the counter. On x86-64 (TSO) stores
are not reordered with stores, nor loads with loads, so a reader that sees the counter sees
the data. Other architectures need fences NumPy cannot emit: shared memory is then disabled
and the TCP transport is used (``shm_supported``).

Segments are unlinked as soon as every member has mapped them (the mappings outlive the
name), so nothing is left in /dev/shm even when a rank is killed; names carry the job token,
the group id and the pid, so jobs never collide.
"""

from __future__ import annotations

import mmap
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import DistTimeoutError, InternalError, PeerError
from ..timeouts import Deadline, format_seconds
from . import placement
from .cma import CrossMemory
from .shm_exposed import ExposedBuffers
from .shm_words import CONTROL_BYTES, CPU, CPU_BITS, DETAIL, DONE, FP, SEQ

_SHM_DIR = "/dev/shm"
#: Seconds between liveness checks (peer sockets polled for EOF) while waiting.
_LIVENESS_INTERVAL = 0.002
#: How long a wait spins (no syscalls) before it starts to yield, when not oversubscribed.
_SPIN_SECONDS = 50e-6
#: Looks at the words in ``quick_wait``'s tight spin, before any clock read or deadline.
_TIGHT_SPINS = 200
#: How long a wait yields before it starts to sleep.
_YIELD_SECONDS = 2e-3
#: Yields of ``quick_wait`` before a wait takes the full path (each one at least a syscall).
_QUICK_YIELDS = 16


def shm_supported() -> bool:
    """Shared memory needs total store ordering (x86-64) and a /dev/shm to put segments in."""
    return platform.machine().lower() in ("x86_64", "amd64") and os.path.isdir(_SHM_DIR)


def oversubscribed(local_ranks: int) -> bool:
    """More ranks on this host than cores this process may run on: never spin."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return local_ranks > cores


class Segment:
    """One rank's shared-memory segment: created by its owner, mapped by the other members."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        self.name = name
        self.path = os.path.join(_SHM_DIR, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            if create:
                os.posix_fallocate(fd, 0, size)  # ENOSPC now, not SIGBUS on first touch
            elif os.fstat(fd).st_size != size:
                raise InternalError(f"shared-memory segment {name} has the wrong size")
            self.mmap = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            if create:
                self.unlink()
            raise
        os.close(fd)
        self.size = size

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class ShmDomain(ExposedBuffers):
    """The segments of one group's members on this host, and waiting on their counters."""

    def __init__(
        self,
        rank: int,
        segments: Sequence[Segment],
        slot_bytes: int,
        local_ranks: int,
        check: Callable[[object, list[int]], None],
        threaded: bool = False,
        names: Sequence[int] | None = None,
        spread: bool = True,
    ) -> None:
        self.rank = rank
        self.names = list(names) if names is not None else list(range(len(segments)))  # for messages
        self.size = len(segments)
        self.slot_bytes = slot_bytes
        self._segments = list(segments)
        self.words = [memoryview(s.mmap)[:CONTROL_BYTES].cast("q") for s in segments]
        self._slots = [
            [np.frombuffer(s.mmap, np.uint8, slot_bytes, CONTROL_BYTES + i * slot_bytes) for i in (0, 1)]
            for s in segments
        ]
        self.mine = self.words[rank]  # this rank's control words (written only by this rank)
        self.mine_bytes = memoryview(segments[rank].mmap)[:CONTROL_BYTES]
        self.view_cache: dict[tuple[int, int, str], list[np.ndarray]] = {}
        # check(what, lagging) raises if the group broke (abort, dead peer, POISON) or a rank
        # waited for (global ranks) has left
        self._check = check
        # Ranks that are threads of one process must release the GIL to let the others run.
        self._spin = 0.0 if threaded or oversubscribed(local_ranks) else _SPIN_SECONDS
        self._yield: Callable[..., object] = (lambda: time.sleep(0)) if threaded else os.sched_yield
        # Ranks that spin must not share a CPU while another idles (placement.py): a wait
        # posts its CPU, and one that stalls beside a peer on the same CPU moves.
        self._placing = spread and bool(self._spin) and placement.available() and len(segments) > 1
        self.moves = 0  # times this rank moved off a peer's CPU (tests, diagnostics)
        self.round = int(self.mine[DONE])  # rounds are numbered from 1; never reset
        self.cma: CrossMemory | None = None  # set by enable_cma when every member may use it
        self.pids: list[int] = []

    def slot(self, rank: int, round_: int) -> np.ndarray:
        return self._slots[rank][round_ & 1]

    def views(self, round_: int, nbytes: int, dtype: np.dtype) -> list[np.ndarray]:
        """Every rank's slot for ``round_``, its first ``nbytes`` viewed as ``dtype`` (cached:
        making NumPy views costs more than the copies of a small collective)."""
        key = (round_ & 1, nbytes, dtype.str)
        found = self.view_cache.get(key)
        if found is None:
            if len(self.view_cache) > 64:
                self.view_cache.clear()
            found = self.view_cache[key] = [slots[round_ & 1][:nbytes].view(dtype) for slots in self._slots]
        return found

    def post(self, word: int, value: int) -> None:
        self.mine[word] = value

    def fingerprint_hash(self, rank: int, round_: int) -> int:
        return self.words[rank][FP + (round_ & 1)]

    def fingerprint(self, rank: int, round_: int) -> list[int]:
        """What ``rank`` published for ``round_``: its call number, then the fingerprint."""
        words, parity = self.words[rank], round_ & 1
        base = DETAIL + 8 * parity
        return [words[SEQ + parity]] + [words[base + i] for i in range(1, 8)]

    def wait(self, word: int, value: int, ranks: Sequence[int], call: Any) -> None:
        """Return once every rank in ``ranks`` has ``word`` ≥ value. ``call`` names the
        collective in messages (``str(call)``) and has the ``deadline`` (only read if the
        wait has to slow down)."""
        words = self.words
        for r in ranks:
            if words[r][word] < value:
                break
        else:
            return
        if not self.quick_wait(word, value, ranks):
            self.wait_slow(word, value, ranks, call.deadline, call)

    def quick_wait(self, word: int, value: int, ranks: Sequence[int]) -> bool:
        """Wait a short while for ``ranks`` to reach ``value``, with no clock and no deadline;
        True if they did. Where ranks have a core each: a tight spin (``_TIGHT_SPINS`` looks,
        a microsecond or two: where a peer usually is); where waiting yields at once (ranks
        outnumber cores, or ranks are threads): up to ``_QUICK_YIELDS`` yields (the usual
        wait of an oversubscribed small call is one or two). A caller that gets False goes
        on with ``wait_slow``, which also watches the deadline and the peers: a caller makes
        what ``wait_slow`` needs (the deadline, the call's description) only then, never on
        a small call's usual, short wait."""
        words = self.words
        if self._spin:
            for _ in range(_TIGHT_SPINS):
                for r in ranks:
                    if words[r][word] < value:
                        break
                else:
                    return True
            return False
        pause = self._yield
        for _ in range(_QUICK_YIELDS):
            pause()
            for r in ranks:
                if words[r][word] < value:
                    break
            else:
                return True
        return False

    def wait_slow(
        self, word: int, value: int, ranks: Sequence[int], deadline: Deadline, what: object
    ) -> None:
        """The rest of a wait that ``quick_wait`` did not end: spin (clocked, up to
        ``_SPIN_SECONDS``, not oversubscribed), yield, then sleep, checking the peers'
        liveness and the deadline as it goes."""
        words, clock = self.words, time.monotonic
        start = clock()
        next_check = start + _LIVENESS_INTERVAL
        pause = 0.0
        placing = self._placing
        if placing:
            cpu = placement.current_cpu()
            self.mine[CPU] = (self.round << CPU_BITS) | (cpu + 1)
        while True:
            lagging = [r for r in ranks if words[r][word] < value]
            if not lagging:
                return
            now = clock()
            if now >= next_check:
                try:
                    self._check(what, [self.names[r] for r in lagging])
                except PeerError:
                    # ``lagging`` is stale: a peer may have posted, finished and left since.
                    if any(words[r][word] < value for r in lagging):
                        raise
                    return
                if now >= deadline.expires_at:
                    raise DistTimeoutError(
                        f"{what}: Timed out after {format_seconds(deadline.budget)}: nothing "
                        f"from rank {', '.join(str(self.names[r]) for r in lagging)} (shared "
                        f"memory). Is it alive, and did "
                        f"every rank call the same collectives in the same order?"
                    )
                next_check = now + _LIVENESS_INTERVAL
            waited = now - start
            if waited < self._spin:
                continue
            if placing:  # stalled past the spin: is the peer on this CPU, waiting for it?
                placing = False
                self._spread(cpu, lagging)
            if waited < _YIELD_SECONDS:
                self._yield()
                continue
            pause = min(max(pause * 2, 20e-6), 1e-3)
            time.sleep(pause)

    def _spread(self, cpu: int, lagging: Sequence[int]) -> None:
        """Move this thread off ``cpu`` if a rank it waits for posted it in this round or the
        last (older posts may be stale: that rank may have moved since)."""
        words, mask, recent = self.words, (1 << CPU_BITS) - 1, self.round - 1
        if not any(words[r][CPU] & mask == cpu + 1 and words[r][CPU] >> CPU_BITS >= recent for r in lagging):
            return
        taken = [
            (w & mask) - 1
            for w in (words[r][CPU] for r in range(self.size) if r != self.rank)
            if w >> CPU_BITS >= recent
        ]
        moved = placement.move_off(cpu, taken, self.rank)
        if moved is not None:
            self.moves += 1
            self.mine[CPU] = (self.round << CPU_BITS) | (moved + 1)

    def close(self) -> None:
        """Drop the mappings (the names were unlinked once every member had mapped them)."""
        self.words = []
        self._slots = []
        self.view_cache = {}
        self.mine = memoryview(b"")
        self.mine_bytes = memoryview(b"")
        for segment in self._segments:
            try:
                segment.mmap.close()
            except BufferError:
                pass  # a NumPy view escaped: the mapping goes when it is collected
        self._segments = []


def segment_size(slot_bytes: int) -> int:
    return CONTROL_BYTES + 2 * slot_bytes


def segment_name(token: str, group_id: int, rank: int, pid: int) -> str:
    """The name of ``rank``'s segment: the job, the group, the rank and its process."""
    return f"accord-{token}-g{group_id:08x}-r{rank}-p{pid}"
