"""The built-in rendezvous handlers: env://, tcp://host:port and file:///path.

Owns: reading the env:// contract (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) through
``config``, with SLURM's and mpiexec's variables (``cluster``) filling what is unset; parsing
URLs; and creating the store: rank 0 hosts the TCPStore, except under a launcher that hosts it
itself (TORCHELASTIC_USE_AGENT_STORE=True, as accordrun and torchrun do): then every rank is a
client and the keys live under ``/worker/attempt_<TORCHELASTIC_RESTART_COUNT>``, so a restarted
attempt never sees a failed one's keys (init_process_group counts ``accord/init_count``).
Errors name the missing or malformed variable or parameter, or every variable looked at.
Must not know about transports or collectives.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

from .. import config
from ..store.base import Store
from ..store.file_store import FileStore
from ..store.prefix_store import PrefixStore
from ..store.tcp_store import TCPStore
from ..timeouts import DEFAULT_STORE_TIMEOUT
from . import cluster
from .registry import register_rendezvous_handler

_ENV_HINT = (
    "Set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (accordrun and torchrun set "
    "them for you), or pass rank= and world_size= to init_process_group"
)


def _query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}


def _int_param(query: dict[str, str], name: str, url: str) -> int | None:
    if name not in query:
        return None
    try:
        return int(query[name])
    except ValueError:
        raise ValueError(f"rendezvous URL {url!r}: {name}={query[name]!r} is not an integer") from None


def _rank_and_size(query: dict[str, str], url: str) -> tuple[int, int]:
    """rank and world_size from a tcp:// or file:// URL's query."""
    rank = _int_param(query, "rank", url)
    size = _int_param(query, "world_size", url)
    scheme = urlparse(url).scheme
    if rank is None:
        raise ValueError(f"{scheme}:// rendezvous needs the rank: pass rank= or add ?rank=")
    if size is None:
        raise ValueError(f"{scheme}:// rendezvous needs the world size: pass world_size= or add ?world_size=")
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"{scheme}:// rendezvous: rank {rank} is not in [0, world_size={size})")
    return rank, size


def _timeout(kwargs: dict[str, Any]) -> timedelta:
    timeout = kwargs.get("timeout")
    return timeout if isinstance(timeout, timedelta) else DEFAULT_STORE_TIMEOUT


def _tcp_store(host: str, port: int, rank: int, size: int, timeout: timedelta) -> Store:
    return TCPStore(
        host,
        port,
        world_size=size,
        is_master=rank == 0,
        timeout=timeout,
        wait_for_workers=False,
        multi_tenant=True,
    )


class AgentAttemptStore(PrefixStore):
    """The view of a launcher's store that one attempt's workers use; closing it closes the
    client connection it wraps (the launcher's server stays up)."""

    def close(self) -> None:
        self.underlying_store.close()


def _env_rank_and_size(query: dict[str, str], url: str) -> tuple[int, int, cluster.ClusterEnv | None]:
    rank = _int_param(query, "rank", url)
    size = _int_param(query, "world_size", url)
    rank = config.env_int(config.RANK) if rank is None else rank
    size = config.env_int(config.WORLD_SIZE) if size is None else size
    found = cluster.detect() if rank is None or size is None else None
    if found is not None:
        rank = found.rank if rank is None else rank
        size = found.world_size if size is None else size
    if rank is None:
        raise ValueError(
            f"env:// rendezvous: the rank is not known: environment variable RANK is "
            f"not set, nor any of {', '.join(cluster.RANK_VARIABLES[1:])}. {_ENV_HINT}"
        )
    if size is None:
        raise ValueError(
            f"env:// rendezvous: the world size is not known: environment variable "
            f"WORLD_SIZE is not set, nor any of {', '.join(cluster.SIZE_VARIABLES[1:])}"
            f". {_ENV_HINT}"
        )
    if size < 1 or not 0 <= rank < size:
        source = f" (from {found.source})" if found is not None else ""
        raise ValueError(f"env:// rendezvous: rank {rank} is not in [0, world_size={size}){source}")
    return rank, size, found


def _env_master(found: cluster.ClusterEnv | None) -> tuple[str, int]:
    addr = config.MASTER_ADDR.raw() or (found.master_addr if found is not None else None)
    if addr is None:
        raise ValueError(
            f"env:// rendezvous: environment variable MASTER_ADDR is not set, nor "
            f"any of {', '.join(cluster.ADDR_VARIABLES[1:])}. {_ENV_HINT}"
        )
    port = config.env_int(config.MASTER_PORT)
    port = port if port is not None else (found.master_port if found is not None else None)
    if port is None:
        raise ValueError(
            f"env:// rendezvous: environment variable MASTER_PORT is not set (nor "
            f"SLURM_JOB_ID, under SLURM). {_ENV_HINT}"
        )
    if not 0 <= port < 65536:
        raise ValueError(f"env:// rendezvous: MASTER_PORT={port} is not a valid port")
    return addr, port


def _agent_attempt() -> int | None:
    """The launcher's restart count when its agent hosts the store, else None."""
    flag = config.TORCHELASTIC_USE_AGENT_STORE.raw()
    if flag is None or flag.lower() not in ("true", "1"):
        return None
    return config.env_int(config.TORCHELASTIC_RESTART_COUNT) or 0


def env_handler(url: str, **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    rank, size, found = _env_rank_and_size(_query(url), url)
    addr, port = _env_master(found)
    attempt, timeout = _agent_attempt(), _timeout(kwargs)
    if attempt is None:
        yield _tcp_store(addr, port, rank, size, timeout), rank, size
        return
    # No wait_for_workers: the launcher already knows who joined, and the "init/" counter of
    # an agent store that outlives attempts would count every attempt's workers.
    client = TCPStore(addr, port, world_size=size, is_master=False, timeout=timeout, wait_for_workers=False)
    yield AgentAttemptStore(f"/worker/attempt_{attempt}", client), rank, size


def tcp_handler(url: str, **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    parsed = urlparse(url)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if not parsed.hostname or port is None:
        raise ValueError(f"tcp:// rendezvous needs a host and a port, e.g. tcp://10.0.0.1:23456; got {url!r}")
    rank, size = _rank_and_size(_query(url), url)
    yield _tcp_store(parsed.hostname, port, rank, size, _timeout(kwargs)), rank, size


def file_handler(url: str, **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    parsed = urlparse(url)
    path = parsed.path
    if parsed.netloc:
        path = f"//{parsed.netloc}{path}"
    if not path:
        raise ValueError(f"file:// rendezvous needs a path, e.g. file:///tmp/job-rendezvous; got {url!r}")
    rank, size = _rank_and_size(_query(url), url)
    yield FileStore(path, size, timeout=_timeout(kwargs)), rank, size


def client_store(init_method: str, timeout: timedelta) -> Store:
    """A client of the store of a job that is already running, named by ``init_method``
    (env:// or tcp://host:port), never hosting it (the job's rank 0 or its launcher does):
    what a process that joins the job meets it in (``accord.join_process_group``)."""
    scheme = urlparse(init_method).scheme
    if scheme == "env":
        addr, port = _env_master(cluster.detect())
        client = TCPStore(addr, port, is_master=False, timeout=timeout, wait_for_workers=False)
        attempt = _agent_attempt()
        return client if attempt is None else AgentAttemptStore(f"/worker/attempt_{attempt}", client)
    if scheme == "tcp":
        host, tcp_port = urlparse(init_method).hostname, urlparse(init_method).port
        if not host or tcp_port is None:
            raise ValueError(f"tcp:// needs a host and a port (tcp://10.0.0.1:23456); got {init_method!r}")
        return TCPStore(host, tcp_port, is_master=False, timeout=timeout, wait_for_workers=False)
    raise ValueError(
        f"joining a running job needs its TCPStore (env:// or tcp://host:port), or store=; "
        f"got {init_method!r}"
    )


register_rendezvous_handler("env", env_handler)
register_rendezvous_handler("tcp", tcp_handler)
register_rendezvous_handler("file", file_handler)
