"""The built-in rendezvous handlers: env://, tcp://host:port and file:///path.

Owns: reading the env:// contract (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) through
``config``, parsing URLs, and creating the store (rank 0 hosts the TCPStore). Errors name the
missing or malformed variable or parameter. Must not know about transports or collectives.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

from .. import config
from ..store.base import Store
from ..store.file_store import FileStore
from ..store.tcp_store import TCPStore
from ..timeouts import DEFAULT_STORE_TIMEOUT
from .registry import register_rendezvous_handler

_ENV_HINT = ("Set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (accordrun and torchrun set "
             "them for you), or pass rank= and world_size= to init_process_group")


def _query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}


def _int_param(query: dict[str, str], name: str, url: str) -> int | None:
    if name not in query:
        return None
    try:
        return int(query[name])
    except ValueError:
        raise ValueError(f"rendezvous URL {url!r}: {name}={query[name]!r} is not an integer") from None


def _rank_and_size(query: dict[str, str], url: str, from_env: bool) -> tuple[int, int]:
    rank = _int_param(query, "rank", url)
    size = _int_param(query, "world_size", url)
    if from_env:
        rank = config.env_int(config.RANK) if rank is None else rank
        size = config.env_int(config.WORLD_SIZE) if size is None else size
    scheme = urlparse(url).scheme
    if rank is None:
        raise ValueError(f"{scheme}:// rendezvous: the rank is not known: environment variable "
                         f"RANK is not set. {_ENV_HINT}" if from_env else
                         f"{scheme}:// rendezvous needs the rank: pass rank= or add ?rank=")
    if size is None:
        raise ValueError(f"{scheme}:// rendezvous: the world size is not known: environment "
                         f"variable WORLD_SIZE is not set. {_ENV_HINT}" if from_env else
                         f"{scheme}:// rendezvous needs the world size: pass world_size= or add ?world_size=")
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"{scheme}:// rendezvous: rank {rank} is not in [0, world_size={size})")
    return rank, size


def _timeout(kwargs: dict[str, Any]) -> timedelta:
    timeout = kwargs.get("timeout")
    return timeout if isinstance(timeout, timedelta) else DEFAULT_STORE_TIMEOUT


def _tcp_store(host: str, port: int, rank: int, size: int, timeout: timedelta) -> Store:
    return TCPStore(host, port, world_size=size, is_master=rank == 0, timeout=timeout,
                    wait_for_workers=False, multi_tenant=True)


def env_handler(url: str, **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    rank, size = _rank_and_size(_query(url), url, from_env=True)
    addr = config.MASTER_ADDR.raw()
    if addr is None:
        raise ValueError(f"env:// rendezvous: environment variable MASTER_ADDR is not set. {_ENV_HINT}")
    port = config.env_int(config.MASTER_PORT)
    if port is None:
        raise ValueError(f"env:// rendezvous: environment variable MASTER_PORT is not set. {_ENV_HINT}")
    if not 0 <= port < 65536:
        raise ValueError(f"env:// rendezvous: MASTER_PORT={port} is not a valid port")
    yield _tcp_store(addr, port, rank, size, _timeout(kwargs)), rank, size


def tcp_handler(url: str, **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    parsed = urlparse(url)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if not parsed.hostname or port is None:
        raise ValueError(f"tcp:// rendezvous needs a host and a port, e.g. tcp://10.0.0.1:23456; got {url!r}")
    rank, size = _rank_and_size(_query(url), url, from_env=False)
    yield _tcp_store(parsed.hostname, port, rank, size, _timeout(kwargs)), rank, size


def file_handler(url: str, **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    parsed = urlparse(url)
    path = parsed.path
    if parsed.netloc:
        path = f"//{parsed.netloc}{path}"
    if not path:
        raise ValueError(f"file:// rendezvous needs a path, e.g. file:///tmp/job-rendezvous; got {url!r}")
    rank, size = _rank_and_size(_query(url), url, from_env=False)
    yield FileStore(path, size, timeout=_timeout(kwargs)), rank, size


register_rendezvous_handler("env", env_handler)
register_rendezvous_handler("tcp", tcp_handler)
register_rendezvous_handler("file", file_handler)
