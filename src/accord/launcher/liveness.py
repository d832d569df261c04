"""Which launchers of a job are alive: each beats a counter in the store, each watches the others'.

Owns: the key ``accordrun/<run_id>/hb/<agent>`` (a counter, one per launcher for its whole life,
whatever attempt it is in), ``Heartbeat`` (a thread, on a store connection of its own, that
bumps this launcher's counter every ``beat_interval(lost_after)`` seconds, so a main thread
busy stopping workers or waiting for a rendezvous never looks dead, and makes it negative when
the launcher exits: gone at once) and ``Liveness`` (the
judgement: a launcher is lost when its counter has not moved for ``lost_after`` seconds *while
ours moved* most of the beats it should have in that time: a store server or an observer
stalled by a loaded machine then delays the verdict instead of making a false one). Must not
know what the launchers do, how they met, or what an attempt is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import DistStoreError
from ..store.base import Store

#: Of the beats our own counter should make in ``lost_after``, how many must it have made
#: before another launcher's silence over the same time counts.
_OWN_BEATS_NEEDED = 0.8


#: What a launcher that exits adds to its counter: negative ever after, it is gone.
_GOODBYE = -(1 << 62)


def beat_interval(lost_after: float) -> float:
    """Seconds between two beats: a tenth of the time after which silence means lost."""
    return min(1.0, max(0.02, lost_after / 10))


def heartbeat_key(agent: str) -> str:
    return f"hb/{agent}"


class Heartbeat:
    """This launcher's heartbeat: beats once now, then every ``every`` seconds in a thread."""

    def __init__(self, store: Store, agent: str, every: float) -> None:
        self._store, self._key, self._every = store, heartbeat_key(agent), every
        self._stop = threading.Event()
        self._store.add(self._key, 1)  # the key exists before anyone can look for it
        self._thread = threading.Thread(target=self._run, daemon=True, name="accordrun-heartbeat")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._store.add(self._key, 1)
            except DistStoreError:
                return  # the store is gone: the main thread hears of it on its next call

    def close(self) -> None:
        """Stop beating and say goodbye (the counter goes negative: nobody waits for us)."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._store.add(self._key, _GOODBYE)
        except DistStoreError:
            pass
        self._store.close()


@dataclass
class _Seen:
    beats: int  # its counter at the last change we saw
    since: float  # when we saw that change (our monotonic clock)
    ours: int  # our own counter then
    moved: bool = False  # its counter changed at least once while we watched


class Liveness:
    """Our view of other launchers' heartbeats (``observe`` refreshes it)."""

    def __init__(
        self, store: Store, me: str, lost_after: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store, self.me, self.lost_after, self.clock = store, me, lost_after, clock
        self.every = beat_interval(lost_after)
        self._needed = max(1, int(_OWN_BEATS_NEEDED * lost_after / self.every))
        self._seen: dict[str, _Seen] = {}
        self._ours = 0

    def observe(self, agents: Iterable[str]) -> None:
        """Read our counter and ``agents``' in one call (their keys exist: each launcher beats
        before it tells anyone its name). Callers look about once per ``every`` seconds."""
        wanted = [agent for agent in dict.fromkeys(agents) if agent != self.me]
        values = self.store.multi_get([heartbeat_key(a) for a in (self.me, *wanted)])
        now = self.clock()
        self._ours = int(values[0])
        for agent, raw in zip(wanted, values[1:]):
            beats, seen = int(raw), self._seen.get(agent)
            if seen is None:
                self._seen[agent] = _Seen(beats, now, self._ours)
            elif beats != seen.beats:
                self._seen[agent] = _Seen(beats, now, self._ours, moved=True)

    def lost(self, agent: str) -> bool:
        """Gone (it said goodbye), or silent for ``lost_after`` seconds while our own
        heartbeat went on."""
        seen = self._seen.get(agent)
        if seen is None or agent == self.me:
            return False
        if seen.beats < 0:
            return True
        return self.clock() - seen.since >= self.lost_after and self._ours - seen.ours >= self._needed

    def proven(self, agent: str) -> bool:
        """Seen beating (its counter moved while we watched), and not lost since."""
        seen = self._seen.get(agent)
        return seen is not None and seen.moved and not self.lost(agent)

    def silence(self, agent: str) -> float:
        """Seconds since we last saw ``agent``'s counter move (or first saw it)."""
        seen = self._seen.get(agent)
        return 0.0 if seen is None else self.clock() - seen.since
