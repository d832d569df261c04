"""How the launchers of one job meet: the shared store, node ranks, and each attempt's layout.

Owns: opening the agent store (static: node 0 hosts it at --master-addr:--master-port; c10d: the
launcher that can bind the --rdzv-endpoint host hosts it, the others connect), the join
protocol of each attempt (static: every node claims its --node-rank; c10d: nodes take ranks in
order of arrival, the first one waits for MAX nodes, or for MIN plus ``last_call_timeout``, or
on a restart for the nodes the previous attempt's verdict named; a node that arrives after
the attempt closed publishes its record past the attempt's last rank and waits: ``waiting``
tells the running nodes who it is), and ``RoundInfo``: every worker's ranks follow from it,
and where the workers' store is. Each attempt's workers get a store of their own, served
next to the agent store by the launcher that hosts that (same address, a fresh port): a
restarted torch program never reads the keys of a failed attempt (torch's programs put theirs
under fixed names such as ``default_pg/…``), and accord's and torch's clients alike speak to
it. Keys of the launchers live under ``accordrun/<run_id>/r<attempt>/`` in the agent store
(``joined``, ``closed``, ``node/<rank>``, ``workers_port``). Must not know how workers are
started or watched.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta

from ..errors import DistStoreError, StoreTimeoutError
from ..store.prefix_store import PrefixStore
from ..store.tcp_server import TCPStoreServer
from ..store.tcp_store import TCPStore
from ..timeouts import format_seconds
from .admission import descendants_checker
from .env import WorkerPlace
from .options import LaunchConfig

Tick = Callable[[], None]
_POLL_S = 0.05


class LaunchError(RuntimeError):
    """The job cannot start or go on; the message says what failed, where, and what to do."""


@dataclass(frozen=True)
class NodeRecord:
    """What each launcher publishes about itself for one attempt."""

    node_rank: int
    host: str
    pid: int
    nproc: int
    role: str
    addr: str = ""  # the address this node reaches the store from
    agent: str = ""  # the launcher's name for its heartbeat (``liveness``)

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, data: bytes) -> NodeRecord:
        return cls(**json.loads(data))


@dataclass(frozen=True)
class RoundInfo:
    """One attempt as every node sees it: who is in, and where the workers' store is."""

    restart: int
    node_rank: int
    nodes: tuple[NodeRecord, ...]
    master_addr: str
    master_port: int

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def world_size(self) -> int:
        return sum(node.nproc for node in self.nodes)

    def agents(self) -> list[str]:
        return [node.agent for node in self.nodes]

    def places(self) -> list[WorkerPlace]:
        """Every local worker's ranks: lower nodes' workers come first, in global and in role
        order."""
        me = self.nodes[self.node_rank]
        offset = sum(node.nproc for node in self.nodes[: self.node_rank])
        peers = [node for node in self.nodes if node.role == me.role]
        role_offset = sum(node.nproc for node in peers if node.node_rank < me.node_rank)
        role_size = sum(node.nproc for node in peers)
        return [
            WorkerPlace(
                offset + i,
                i,
                self.world_size,
                me.nproc,
                self.node_rank,
                self.nnodes,
                role_offset + i,
                role_size,
            )
            for i in range(me.nproc)
        ]


@dataclass(frozen=True)
class Waiting:
    """This node came after attempt ``restart`` had started with ``nnodes`` nodes: it waits
    (its record published under an index >= ``nnodes``) for the attempt to end."""

    restart: int
    nnodes: int


def is_local_address(host: str) -> bool:
    """Whether ``host`` names an address of this machine (we can bind to it)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, address in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((address[0], 0))
                return True
        except OSError:
            continue
    return False


def _host_store(cfg: LaunchConfig, timeout: timedelta) -> TCPStore | None:
    """The store, hosted here; None if a c10d endpoint's port is already served on this host."""
    try:
        return TCPStore(cfg.rdzv_host, cfg.rdzv_port, is_master=True, wait_for_workers=False, timeout=timeout)
    except DistStoreError as exc:
        if cfg.rdzv_backend == "c10d" and cfg.rdzv_port:
            return None  # another launcher on this host got there first: join it
        raise LaunchError(
            f"cannot host the job's store on port {cfg.rdzv_port} of this node "
            f"({exc}). Pick a free --master-port (or --rdzv-endpoint port)."
        ) from exc


def open_store(cfg: LaunchConfig) -> tuple[TCPStore, bool]:
    """(the store all launchers and workers share, whether this launcher hosts it)."""
    timeout = timedelta(seconds=cfg.join_timeout)
    hosts = cfg.node_rank == 0 if cfg.rdzv_backend == "static" else is_local_address(cfg.rdzv_host)
    store = _host_store(cfg, timeout) if hosts else None
    if store is not None:
        return store, True
    try:
        return TCPStore(cfg.rdzv_host, cfg.rdzv_port, is_master=False, timeout=timeout), False
    except DistStoreError as exc:
        raise LaunchError(
            f"cannot reach the job's store at {cfg.rdzv_host}:{cfg.rdzv_port} within "
            f"{format_seconds(cfg.join_timeout)} ({exc}). Is node 0's accordrun running, with "
            f"the same --master-addr/--master-port (or --rdzv-endpoint)?"
        ) from exc


class Rendezvous:
    """The join protocol of every attempt, over the agent store."""

    def __init__(
        self, store: TCPStore, cfg: LaunchConfig, tick: Tick, hosting: bool, agent: str = ""
    ) -> None:
        self.store = PrefixStore(f"accordrun/{cfg.run_id}", store)
        self.agent = agent
        self.port = store.port
        self.addr = store.local_address() or "127.0.0.1"
        self.cfg = cfg
        self.tick = tick
        self.host = socket.gethostname()
        self.hosting = hosting
        self._workers_store: TCPStoreServer | None = None

    def close(self) -> None:
        """Stop serving the last attempt's workers' store (if this launcher serves it)."""
        server, self._workers_store = self._workers_store, None
        if server is not None:
            server.close()

    def join(self, restart: int, expected: int | None = None, ahead: int = 0) -> RoundInfo | Waiting:
        """Meet the other nodes for attempt ``restart``. ``expected``: how many nodes the
        previous attempt's verdict restarts with (the attempt starts once they came, without
        waiting ``last_call_timeout``); ``ahead``: for a node that was not in the previous
        attempt, how many nodes that were go first (they keep the places; ranks are by
        arrival). Waiting: the attempt had started without this node."""
        if self.cfg.rdzv_backend == "static":
            node_rank, nnodes = self.cfg.node_rank, self.cfg.max_nodes
        else:
            if ahead:
                self._let_ahead(restart, ahead)
            node_rank, nnodes = self._arrive(restart, expected)
        me = NodeRecord(
            node_rank, self.host, os.getpid(), self.cfg.nproc_per_node, self.cfg.role, self.addr, self.agent
        )
        key = f"r{restart}/node/{node_rank}"
        held = self.store.compare_set(key, "", me.encode())
        if held.decode() != me.encode():
            other = NodeRecord.decode(held)
            raise LaunchError(
                f"node rank {node_rank} is taken by accordrun pid {other.pid} on "
                f"{other.host}: give every node its own --node-rank (0 … "
                f"{nnodes - 1})."
            )
        if node_rank >= nnodes:
            if self.hosting:  # a race at the start can leave it out; the others need this
                self._serve_workers(restart)
            return Waiting(restart, nnodes)
        nodes = self._gather(restart, nnodes)
        if self.hosting:
            self._serve_workers(restart)
        return RoundInfo(restart, node_rank, nodes, self.cfg.rdzv_host, self._workers_port(restart))

    def waiting(self, restart: int, nnodes: int) -> list[NodeRecord]:
        """The nodes that came after attempt ``restart`` started with ``nnodes`` nodes and wait
        for it to end (c10d)."""
        if self.cfg.rdzv_backend == "static":
            return []
        joined = self.store.add(f"r{restart}/joined", 0)
        keys = [f"r{restart}/node/{i}" for i in range(nnodes, joined)]
        present = [key for key in keys if self.store.check([key])]
        return [NodeRecord.decode(value) for value in self.store.multi_get(present)] if present else []

    def _serve_workers(self, restart: int) -> None:
        """The hosting launcher starts attempt ``restart``'s workers' store (closing the
        previous attempt's) and publishes its port."""
        self.close()
        self._workers_store = TCPStoreServer(
            0, host=self.cfg.rdzv_host, admit=descendants_checker(os.getpid())
        )
        self.store.set(f"r{restart}/workers_port", str(self._workers_store.port))

    def _workers_port(self, restart: int) -> int:
        """The port of attempt ``restart``'s workers' store, once the hosting launcher
        published it."""
        key = f"r{restart}/workers_port"
        if self.wait_keys([key], self.cfg.join_timeout):
            raise LaunchError(
                f"the launcher hosting the store at {self.cfg.rdzv_host}:"
                f"{self.port} never published attempt {restart}'s workers' store; "
                f"is it alive?"
            )
        return int(self.store.get(key))

    def _gather(self, restart: int, nnodes: int) -> tuple[NodeRecord, ...]:
        keys = [f"r{restart}/node/{i}" for i in range(nnodes)]
        missing = self.wait_keys(keys, self.cfg.join_timeout)
        if missing:
            ranks = [int(key.rsplit("/", 1)[1]) for key in missing]
            raise LaunchError(
                f"rendezvous of attempt {restart} timed out after "
                f"{format_seconds(self.cfg.join_timeout)}: node ranks {ranks} of {nnodes} never "
                f"joined at {self.cfg.rdzv_host}:{self.port}. Did their accordrun start, with the "
                f"same --nnodes, --master-addr/--master-port and --rdzv-id?"
            )
        return tuple(NodeRecord.decode(value) for value in self.store.multi_get(keys))

    def wait_keys(self, keys: list[str], seconds: float) -> list[str]:
        """Wait up to ``seconds`` for ``keys`` (ticking meanwhile); return those still missing."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            try:
                self.store.wait(keys, timedelta(seconds=max(0.0, min(0.25, remaining))))
                return []
            except StoreTimeoutError:
                if remaining <= 0:
                    return [key for key in keys if not self.store.check([key])]
            self.tick()

    def _arrive(self, restart: int, expected: int | None) -> tuple[int, int]:
        """c10d: (node rank by arrival, number of nodes in this attempt); a rank >= that number:
        the attempt had started without this node."""
        index = self.store.add(f"r{restart}/joined", 1) - 1
        if index == 0:
            count = self._lead(restart, expected)
        else:
            limit = self.cfg.join_timeout + self.cfg.last_call_timeout + 30.0
            if self.wait_keys([f"r{restart}/closed"], limit):
                raise LaunchError(
                    f"rendezvous at {self.cfg.rdzv_host}:{self.port}: the first node "
                    f"never closed attempt {restart}; is its accordrun alive?"
                )
            count = int(self.store.get(f"r{restart}/closed"))
        if count == 0:
            raise LaunchError(
                f"rendezvous at {self.cfg.rdzv_host}:{self.port}: fewer than "
                f"{self.cfg.min_nodes} nodes (--nnodes {self.cfg.nnodes}) joined within "
                f"{format_seconds(self.cfg.join_timeout)}."
            )
        return index, count

    def _let_ahead(self, restart: int, ahead: int) -> None:
        """Wait (up to ``last_call_timeout``) until ``ahead`` nodes joined attempt ``restart``."""
        deadline = time.monotonic() + self.cfg.last_call_timeout
        while self.store.add(f"r{restart}/joined", 0) < ahead and time.monotonic() < deadline:
            self.tick()
            time.sleep(_POLL_S)

    def _lead(self, restart: int, expected: int | None) -> int:
        """The first node decides when the attempt is closed; returns its node count (0: fail)."""
        key, start, since_min = f"r{restart}/joined", time.monotonic(), None
        while True:
            joined, now = self.store.add(key, 0), time.monotonic()
            if joined >= self.cfg.min_nodes:
                since_min = since_min if since_min is not None else now
                if (
                    joined >= self.cfg.max_nodes
                    or (expected and joined >= expected)
                    or now - since_min >= self.cfg.last_call_timeout
                ):
                    break
            elif now - start >= self.cfg.join_timeout:
                self.store.set(f"r{restart}/closed", "0")
                return 0
            self.tick()
            time.sleep(_POLL_S)
        count = min(self.store.add(key, 0), self.cfg.max_nodes)
        self.store.set(f"r{restart}/closed", str(count))
        return count
