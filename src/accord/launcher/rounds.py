"""One attempt across nodes: stop together, agree on what happened, restart or finish together.

Owns: the per-attempt keys under ``accordrun/<run_id>/r<attempt>/`` — ``replaced`` (how many
workers were replaced in place during the attempt, --replace-workers: each counts as a restart,
and the next attempt's number counts them), ``stop`` (why every node
stops its workers: a node's workers failed, a signal, a node was lost, or nodes wait to join;
the first reason written wins), ``status/<node>`` (how the attempt ended there, with its
failures) and ``published`` (how many did so), ``verdict`` (the first node to decide writes
it, every node follows it: so all restart, or all stop, with the same root cause, the same
number of nodes and the same attempt number next) and ``left`` (the node hosting the store
waits for the others, and for the nodes waiting to join, to read the final verdict before the
store goes away); and the rule of ``decide``: a restart needs restarts left (replacements
count) and at least MIN nodes that are still there. Must not know how workers are started,
how nodes met, or how liveness is judged (``liveness``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import DistStoreError
from ..store.base import Store
from .liveness import Liveness
from .nodes import RoundInfo, Tick
from .options import LaunchConfig
from .report import Failure

SUCCEEDED, FAILED, STOPPED, INTERRUPTED, RESIZE, RESTART = (
    "succeeded",
    "failed",
    "stopped",
    "interrupted",
    "resize",
    "restart",
)
_POLL_S = 0.05
#: How long the node hosting the store waits for the others to read the final verdict.
_LEAVE_WAIT_S = 10.0


@dataclass
class NodeStatus:
    """How an attempt ended on one node: succeeded, failed (its workers), stopped (because
    another node failed or was lost), interrupted (a signal) or resize (it saw nodes waiting
    to join, with room for them), with the failures seen there."""

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
    """What every node does after an attempt: finish, restart, or stop with this root cause.
    ``survivors``: the attempt's nodes that were not lost; a restart says with how many nodes
    (``nnodes``): the survivors go first, the nodes that waited to join after them.
    ``replaced``: the workers replaced in place during the attempt (restarts too)."""

    outcome: str
    root: Failure | None = None
    others: list[Failure] = field(default_factory=list)
    detail: str = ""
    nnodes: int = 0
    survivors: int = 0
    replaced: int = 0

    def restarts(self, attempt: int) -> int:
        """Restarts used by the end of attempt ``attempt`` (whose verdict this is)."""
        return attempt + self.replaced

    def encode(self) -> str:
        return json.dumps(
            {
                "outcome": self.outcome,
                "detail": self.detail,
                "root": json.loads(self.root.encode()) if self.root else None,
                "others": [json.loads(f.encode()) for f in self.others],
                "nnodes": self.nnodes,
                "survivors": self.survivors,
                "replaced": self.replaced,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Verdict:
        raw = json.loads(data)
        root = Failure.decode(raw["root"]) if raw["root"] else None
        others = [Failure.decode(f) for f in raw["others"]]
        replaced = raw.get("replaced", 0)
        return cls(raw["outcome"], root, others, raw["detail"], raw["nnodes"], raw["survivors"], replaced)


def _lost(info: RoundInfo, node_rank: int, seconds: float) -> Failure:
    node = info.nodes[node_rank]
    return Failure(
        -1,
        -1,
        node_rank,
        node.host,
        node.pid,
        0,
        time.time() - seconds,
        f"its accordrun (pid {node.pid}) stopped answering for {seconds:g} s: was it "
        f"killed, or is its host down?",
    )


def _count(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def decide(
    info: RoundInfo,
    statuses: dict[int, NodeStatus | None],
    cfg: LaunchConfig,
    lost_after: float,
    waiting: int = 0,
    replaced: int = 0,
) -> Verdict:
    """The verdict from every node's status (None: the node was lost), the number of nodes
    waiting to join and of the workers replaced in place during the attempt. A lost node
    comes first among the failures: whatever failed after it most likely failed because of
    it."""
    verdict = _verdict(info, statuses, cfg, lost_after, waiting, info.restart + replaced)
    verdict.replaced = replaced
    return verdict


def _verdict(
    info: RoundInfo,
    statuses: dict[int, NodeStatus | None],
    cfg: LaunchConfig,
    lost_after: float,
    waiting: int,
    used: int,
) -> Verdict:
    lost = sorted(n for n, s in statuses.items() if s is None)
    survivors = info.nnodes - len(lost)
    failures = [_lost(info, n, lost_after) for n in lost] + sorted(
        (f for s in statuses.values() if s for f in s.failures), key=lambda f: (f.caused_by_a_peer(), f.time)
    )
    root, others = (failures[0], failures[1:]) if failures else (None, [])
    interrupted = [s for s in statuses.values() if s is not None and s.outcome == INTERRUPTED]
    if interrupted:
        first = interrupted[0]
        detail = f"interrupted by {first.detail} on node {first.node_rank} ({first.host})"
        return Verdict(INTERRUPTED, root, others, detail, survivors=survivors)
    resized = any(s is not None and s.outcome == RESIZE for s in statuses.values())
    if not failures and not resized:
        if all(s is not None and s.outcome == SUCCEEDED for s in statuses.values()):
            return Verdict(SUCCEEDED, survivors=survivors)
        detail = "workers were stopped, but no node reported a failure"
        return Verdict(FAILED, detail=detail, survivors=survivors)
    if survivors < cfg.min_nodes:
        names = ", ".join(f"node {n} ({info.nodes[n].host})" for n in lost)
        detail = (
            f"lost {names}: {_count(survivors)} left, fewer than the {cfg.min_nodes} that "
            f"--nnodes {cfg.nnodes} needs"
        )
        return Verdict(FAILED, root, others, detail, survivors=survivors)
    if used >= cfg.max_restarts:
        return Verdict(FAILED, root, others, survivors=survivors)
    nnodes = min(cfg.max_nodes, survivors + waiting)
    detail = "" if failures else f"{_count(waiting)} waiting to join"
    return Verdict(RESTART, root, others, detail, nnodes, survivors)


class RoundChannel:
    """This node's end of one attempt's coordination keys."""

    def __init__(self, store: Store, info: RoundInfo, liveness: Liveness | None, tick: Tick) -> None:
        self.store, self.info, self.liveness, self.tick = store, info, liveness, tick
        self._prefix = f"r{info.restart}"

    def _key(self, name: str) -> str:
        return f"{self._prefix}/{name}"

    def stopped(self) -> bool:
        """Whether some node asked every node to stop its workers."""
        return self.store.check([self._key("stop")])

    def stop_reason(self) -> str | None:
        """Why the workers stop (FAILED, INTERRUPTED, STOPPED: a node was lost, RESIZE), if
        some node said so."""
        if not self.stopped():
            return None
        return str(json.loads(self.store.get(self._key("stop")))["why"])

    def raise_alarm(self, why: str = FAILED) -> None:
        """Tell every node to stop its workers (the first reason given stays)."""
        reason = json.dumps({"node": self.info.node_rank, "why": why})
        self.store.compare_set(self._key("stop"), "", reason)

    def take_replacement(self, cfg: LaunchConfig) -> int | None:
        """Count one more worker replaced in place, if --max-restarts allows it: the number
        of restarts used with it; None: none left (nothing counted)."""
        count = self.store.add(self._key("replaced"), 1)
        if self.info.restart + count > cfg.max_restarts:
            self.store.add(self._key("replaced"), -1)
            return None
        return self.info.restart + count

    def replacements(self) -> int:
        """How many workers were replaced in place during this attempt (every node's)."""
        return self.store.add(self._key("replaced"), 0)

    def anyone_finished(self) -> bool:
        """Whether some node already published how the attempt ended there."""
        return self.store.add(self._key("published"), 0) > 0

    def publish(self, status: NodeStatus) -> None:
        self.store.set(self._key(f"status/{status.node_rank}"), status.encode())
        self.store.add(self._key("published"), 1)

    def lost_nodes(self) -> list[int]:
        """The other nodes of this attempt whose launchers are lost (``liveness``)."""
        if self.liveness is None:
            return []
        agents = self.info.agents()
        self.liveness.observe(agents)
        return [n for n, agent in enumerate(agents) if n != self.info.node_rank and self.liveness.lost(agent)]

    def gather(self) -> dict[int, NodeStatus | None]:
        """Every node's status, waiting as long as their launchers are alive (None: lost)."""
        pending = set(range(self.info.nnodes))
        found: dict[int, NodeStatus | None] = {}
        next_look = 0.0
        while pending:
            for node in sorted(pending):
                key = self._key(f"status/{node}")
                if self.store.check([key]):
                    found[node] = NodeStatus.decode(self.store.get(key))
            pending -= set(found)
            if pending and self.liveness is not None and time.monotonic() >= next_look:
                next_look = time.monotonic() + self.liveness.every
                found.update((node, None) for node in set(self.lost_nodes()) & pending)
                pending -= set(found)
            if pending:
                self.tick()
                time.sleep(_POLL_S)
        return found

    def settle(self, mine: Verdict) -> Verdict:
        """The attempt's verdict: the first node's to decide (maybe this one's)."""
        held = self.store.compare_set(self._key("verdict"), "", mine.encode())
        return Verdict.decode(held)

    def leave(self, hosting: bool, expected: int) -> None:
        leave(self.store, self.info.restart, hosting, expected)


def leave(store: Store, restart: int, hosting: bool, expected: int) -> None:
    """After attempt ``restart``'s final verdict: say we are done; the host waits (up to 10 s)
    for ``expected`` nodes to say so. The verdict is known by now: a store already gone
    changes nothing for a guest."""
    key = f"r{restart}/left"
    try:
        left = store.add(key, 1)
    except DistStoreError:
        if hosting:
            raise
        return
    deadline = time.monotonic() + _LEAVE_WAIT_S
    while hosting and left < expected and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = store.add(key, 0)


def await_verdict(
    store: Store, restart: int, tick: Tick, on_wait: Callable[[], None] | None = None
) -> Verdict:
    """For a node waiting to join: attempt ``restart``'s verdict, once its nodes agreed on it
    (``on_wait`` is called first if that takes a wait)."""
    key = f"r{restart}/verdict"
    if on_wait is not None and not store.check([key]):
        on_wait()
    while not store.check([key]):
        tick()
        time.sleep(0.1)
    return Verdict.decode(store.get(key))
