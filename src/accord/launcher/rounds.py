"""One attempt across nodes: stop together, agree on what happened, restart or finish together.

Owns: the per-attempt keys under ``accordrun/<run_id>/r<attempt>/`` — ``failed`` (any node's
workers failed or it was interrupted: every node stops its workers), ``hb/<node>`` (a heartbeat
counter; a node whose counter stops moving for ACCORD_LAUNCHER_HEARTBEAT_TIMEOUT is lost),
``status/<node>`` (how the attempt ended there, with its failures), ``verdict`` (the first
node to decide writes it, every node follows it: so all restart, or all stop, with the same
root cause) and ``left`` (the node hosting the store waits for the others to read the verdict
before the store goes away). Must not know how workers are started or how nodes met.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ..errors import DistStoreError
from ..store.base import Store
from .nodes import RoundInfo, Tick
from .report import Failure

SUCCEEDED, FAILED, STOPPED, INTERRUPTED, RESTART = (
    "succeeded",
    "failed",
    "stopped",
    "interrupted",
    "restart",
)
_BEAT_EVERY_S = 0.5
_POLL_S = 0.05


@dataclass
class NodeStatus:
    """How an attempt ended on one node: succeeded, failed (its workers), stopped (because
    another node failed) or interrupted (a signal), with the failures seen there."""

    node_rank: int
    host: str
    outcome: str
    failures: list[Failure] = field(default_factory=list)
    detail: str = ""

    def encode(self) -> str:
        return json.dumps(
            {
                "node_rank": self.node_rank,
                "host": self.host,
                "outcome": self.outcome,
                "failures": [json.loads(f.encode()) for f in self.failures],
                "detail": self.detail,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> NodeStatus:
        raw = json.loads(data)
        raw["failures"] = [Failure.decode(f) for f in raw["failures"]]
        return cls(**raw)


@dataclass
class Verdict:
    """What every node does after an attempt: finish, restart, or stop with this root cause."""

    outcome: str
    root: Failure | None = None
    others: list[Failure] = field(default_factory=list)
    detail: str = ""

    def encode(self) -> str:
        return json.dumps(
            {
                "outcome": self.outcome,
                "detail": self.detail,
                "root": json.loads(self.root.encode()) if self.root else None,
                "others": [json.loads(f.encode()) for f in self.others],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Verdict:
        raw = json.loads(data)
        root = Failure.decode(raw["root"]) if raw["root"] else None
        return cls(raw["outcome"], root, [Failure.decode(f) for f in raw["others"]], raw["detail"])


def _lost(info: RoundInfo, node_rank: int, seconds: float) -> Failure:
    node = info.nodes[node_rank]
    return Failure(
        -1,
        -1,
        node_rank,
        node.host,
        node.pid,
        0,
        time.time(),
        f"its accordrun (pid {node.pid}) stopped answering for {seconds:g} s: was it "
        f"killed, or is its host down?",
    )


def decide(
    info: RoundInfo, statuses: dict[int, NodeStatus | None], max_restarts: int, lost_after: float
) -> Verdict:
    """The verdict from every node's status (None: the node was lost)."""
    failures = sorted(
        (f for s in statuses.values() if s for f in s.failures), key=lambda f: (f.caused_by_a_peer(), f.time)
    )
    failures += [_lost(info, n, lost_after) for n, s in sorted(statuses.items()) if s is None]
    interrupted = [s for s in statuses.values() if s is not None and s.outcome == INTERRUPTED]
    if interrupted:
        first = interrupted[0]
        detail = f"interrupted by {first.detail} on node {first.node_rank} ({first.host})"
        return Verdict(INTERRUPTED, failures[0] if failures else None, failures[1:], detail)
    if not failures:
        if all(s is not None and s.outcome == SUCCEEDED for s in statuses.values()):
            return Verdict(SUCCEEDED)
        return Verdict(FAILED, detail="workers were stopped, but no node reported a failure")
    lost = any(s is None for s in statuses.values())
    retry = info.restart < max_restarts and not lost
    return Verdict(RESTART if retry else FAILED, failures[0], failures[1:])


class RoundChannel:
    """This node's end of one attempt's coordination keys."""

    def __init__(self, store: Store, info: RoundInfo, lost_after: float, tick: Tick) -> None:
        self.store, self.info, self.lost_after, self.tick = store, info, lost_after, tick
        self._prefix = f"r{info.restart}"
        self._next_beat = 0.0

    def _key(self, name: str) -> str:
        return f"{self._prefix}/{name}"

    def beat(self) -> None:
        """Bump this node's heartbeat (at most every half second)."""
        now = time.monotonic()
        if now >= self._next_beat:
            self.store.add(self._key(f"hb/{self.info.node_rank}"), 1)
            self._next_beat = now + _BEAT_EVERY_S

    def failed_elsewhere(self) -> bool:
        return self.store.check([self._key("failed")])

    def raise_alarm(self) -> None:
        """Tell every node to stop its workers."""
        self.store.compare_set(self._key("failed"), "", str(self.info.node_rank))

    def publish(self, status: NodeStatus) -> None:
        self.store.set(self._key(f"status/{status.node_rank}"), status.encode())

    def gather(self) -> dict[int, NodeStatus | None]:
        """Every node's status, waiting as long as their heartbeats move (None: lost)."""
        pending = set(range(self.info.nnodes))
        found: dict[int, NodeStatus | None] = {}
        last_seen = {n: (-1, time.monotonic()) for n in pending}
        while pending:
            for node in sorted(pending):
                key = self._key(f"status/{node}")
                if self.store.check([key]):
                    found[node] = NodeStatus.decode(self.store.get(key))
                elif self._silent(node, last_seen):
                    found[node] = None
            pending -= set(found)
            if pending:
                self.beat()
                self.tick()
                time.sleep(_POLL_S)
        return found

    def _silent(self, node: int, last_seen: dict[int, tuple[int, float]]) -> bool:
        beats, now = self.store.add(self._key(f"hb/{node}"), 0), time.monotonic()
        if beats != last_seen[node][0]:
            last_seen[node] = (beats, now)
        return now - last_seen[node][1] > self.lost_after

    def settle(self, mine: Verdict) -> Verdict:
        """The attempt's verdict: the first node's to decide (maybe this one's)."""
        held = self.store.compare_set(self._key("verdict"), "", mine.encode())
        return Verdict.decode(held)

    def leave(self, hosting: bool, expected: int) -> None:
        """Say we are done; the host waits (up to 10 s) for ``expected`` nodes to say so.
        The verdict is known by now: a store already gone changes nothing for a guest."""
        try:
            left = self.store.add(self._key("left"), 1)
        except DistStoreError:
            if hosting:
                raise
            return
        deadline = time.monotonic() + 10.0
        while hosting and left < expected and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            left = self.store.add(self._key("left"), 0)
