"""accordrun's options for how nodes meet and what a failure costs: ``--nnodes MIN:MAX``, the
rendezvous (``--rdzv-*``, ``--master-*``, ``--node-rank``, ``--standalone``), ``--max-restarts``,
``--replace-workers`` and ``--monitor-interval``.

Owns: their parser entries, their value syntaxes (``MIN:MAX``, ``host:port`` endpoints,
``--rdzv-conf k=v,…``), torchrun's rendezvous defaults (``--standalone``; a single node without
``--master-port`` gets a free port; a static job waits for MAX nodes) and their usage checks,
resolved into an ``ElasticOptions``. ``options`` builds the parser and the LaunchConfig around
them. Must not know how options reach the environment (``options`` hands in the function that
adds one) or how nodes meet.
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MASTER_PORT = 29500
DEFAULT_C10D_PORT = 29400

#: options._add: (parser, name, help, *short, flag=..., **argparse keywords), the option's
#: default read from PET_<NAME> as torchrun.
AddOption = Callable[..., None]


@dataclass(frozen=True)
class ElasticOptions:
    """The resolved and checked elastic part of a LaunchConfig (its fields of the same names)."""

    min_nodes: int
    max_nodes: int
    node_rank: int
    rdzv_backend: str
    rdzv_host: str
    rdzv_port: int
    run_id: str
    join_timeout: float
    last_call_timeout: float
    max_restarts: int
    replace_workers: bool
    monitor_interval: float


def add_node_options(parser: argparse.ArgumentParser, add: AddOption) -> None:
    """--nnodes and the rendezvous: how the nodes of a job meet."""
    add(
        parser,
        "nnodes",
        "Number of nodes, or MIN:MAX for an elastic job (c10d): it goes on without a lost node "
        "while MIN are left, and takes in nodes that arrive, up to MAX.",
        default="1:1",
    )
    add(parser, "node-rank", "This node's rank (static rendezvous).", type=int, default=0)
    add(parser, "master-addr", "Address of node 0 (static rendezvous).", default="127.0.0.1")
    add(
        parser,
        "master-port",
        "Port of node 0's store (static rendezvous); default 29500, or a free port on a single node.",
        type=int,
        default=None,
    )
    add(parser, "local-addr", "Accepted for torchrun compatibility (unused).", default=None)
    add(parser, "standalone", "Single node: a store on a free local port.", flag=True)
    add(parser, "rdzv-backend", "'static' (--node-rank) or 'c10d' (ranks by arrival).", default="static")
    add(parser, "rdzv-endpoint", "host:port of the rendezvous store.", default="")
    add(parser, "rdzv-id", "Job id shared by all nodes (TORCHELASTIC_RUN_ID).", default="none")
    add(parser, "rdzv-conf", "key=value,…: join_timeout, last_call_timeout (seconds).", default="")


def add_recovery_options(parser: argparse.ArgumentParser, add: AddOption) -> None:
    """--max-restarts, --replace-workers, --monitor-interval: what a failure costs the job."""
    add(
        parser,
        "max-restarts",
        "Restarts of the whole job (after a failure, a lost node, or nodes joining) before giving "
        "up; with --replace-workers, each replacement counts as one.",
        type=int,
        default=0,
    )
    add(
        parser,
        "replace-workers",
        "A worker that fails (a signal, a non-zero exit) does not stop the others: a new one "
        "starts in its place, with ACCORD_JOIN=1 (its init_process_group joins the running job, "
        "when the others call accord.grow_group). Each counts against --max-restarts.",
        flag=True,
    )
    add(
        parser,
        "monitor-interval",
        "Seconds between checks of the workers and other nodes.",
        type=float,
        default=0.1,
    )


def parse_nnodes(text: str) -> tuple[int, int]:
    parts = text.split(":")
    try:
        low, high = (int(parts[0]),) * 2 if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except (ValueError, IndexError):
        raise ValueError(f"--nnodes={text!r}: expected N or MIN:MAX, e.g. 2 or 1:4") from None
    if len(parts) > 2 or not 0 < low <= high:
        raise ValueError(f"--nnodes={text!r}: need 0 < MIN <= MAX")
    return low, high


def parse_endpoint(text: str, default_port: int) -> tuple[str, int]:
    """'host:port', 'host', '[v6]:port' → (host, port)."""
    match = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:]+)(?::(\d+))?", text.strip())
    if match is None:
        raise ValueError(f"rendezvous endpoint {text!r}: expected host:port, e.g. 10.0.0.1:29400")
    host = match.group(1) or match.group(3)
    port = match.group(2) or match.group(4)
    return host, int(port) if port else default_port


def parse_rdzv_conf(text: str) -> dict[str, str]:
    conf = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--rdzv-conf={text!r}: expected key=value,…; got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def _seconds(conf: dict[str, str], key: str, default: float) -> float:
    try:
        value = float(conf.get(key, default))
    except ValueError:
        raise ValueError(f"--rdzv-conf {key}={conf[key]!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"--rdzv-conf {key}={value:g} must be > 0")
    return value


def _rendezvous(args: argparse.Namespace, max_nodes: int) -> tuple[str, str, int, str]:
    """(backend, store host, store port, run id), with torchrun's defaults."""
    backend = args.rdzv_backend
    if backend not in ("static", "c10d"):
        raise ValueError(
            f"--rdzv-backend={backend!r}: accordrun has 'static' and 'c10d' (etcd "
            f"backends need an etcd server; use c10d with --rdzv-endpoint)"
        )
    single = not args.rdzv_endpoint and args.master_port is None and max_nodes == 1
    if args.standalone or (backend == "static" and single):
        return "c10d", "127.0.0.1", 0, str(uuid.uuid4())
    if backend == "static" and not args.rdzv_endpoint:
        host = args.master_addr
        port = DEFAULT_MASTER_PORT if args.master_port is None else args.master_port
    else:
        if not args.rdzv_endpoint:
            raise ValueError(
                "--rdzv-backend=c10d needs --rdzv-endpoint HOST:PORT (the node "
                "that can bind HOST hosts the store)"
            )
        default = DEFAULT_MASTER_PORT if backend == "static" else DEFAULT_C10D_PORT
        host, port = parse_endpoint(args.rdzv_endpoint, default)
    if not 0 <= port < 65536:
        raise ValueError(f"rendezvous port {port} is not a valid port")
    return backend, "127.0.0.1" if host == "localhost" else host, port, args.rdzv_id


def elastic_from_args(args: argparse.Namespace) -> ElasticOptions:
    """Check the parsed node, rendezvous and recovery options; resolve torchrun's defaults.

    Raises:
        ValueError: a malformed or contradictory option (the message names it).
    """
    min_nodes, max_nodes = parse_nnodes(str(args.nnodes))
    conf = parse_rdzv_conf(args.rdzv_conf)
    backend, host, port, run_id = _rendezvous(args, max_nodes)
    if backend == "static":
        min_nodes = max_nodes  # as torchrun: a static job waits for MAX nodes
        if not 0 <= args.node_rank < max_nodes:
            raise ValueError(f"--node-rank={args.node_rank} is not in [0, --nnodes={max_nodes})")
    if args.max_restarts < 0:
        raise ValueError(f"--max-restarts={args.max_restarts} must be >= 0")
    if args.monitor_interval <= 0:
        raise ValueError(f"--monitor-interval={args.monitor_interval} must be > 0")
    return ElasticOptions(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        node_rank=args.node_rank,
        rdzv_backend=backend,
        rdzv_host=host,
        rdzv_port=port,
        run_id=run_id,
        join_timeout=_seconds(conf, "join_timeout", 600.0),
        last_call_timeout=_seconds(conf, "last_call_timeout", 30.0),
        max_restarts=args.max_restarts,
        replace_workers=bool(getattr(args, "replace_workers", False)),
        monitor_interval=args.monitor_interval,
    )
