"""URL scheme → rendezvous handler, as torch.distributed.rendezvous.

Owns: ``register_rendezvous_handler`` and ``rendezvous(url, rank, world_size, **kwargs)``,
which returns the handler's iterator of (store, rank, world_size). Must not know about
transports or collectives.

A handler is ``handler(url: str, **kwargs) -> Iterator[tuple[Store, int, int]]``; rank and
world_size reach it as the URL's query parameters (``?rank=0&world_size=4``), as in torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode, urlparse, urlunparse

from ..store.base import Store

Handler = Callable[..., Iterator[tuple[Store, int, int]]]
_handlers: dict[str, Handler] = {}


def register_rendezvous_handler(scheme: str, handler: Handler) -> None:
    """Register ``handler`` for URLs ``scheme://…``.

    Raises:
        RuntimeError: a handler is already registered for the scheme (as torch).
    """
    if scheme in _handlers:
        raise RuntimeError(f"rendezvous handler for {scheme}:// is already registered")
    _handlers[scheme] = handler


def rendezvous(
    url: str, rank: int = -1, world_size: int = -1, **kwargs: Any
) -> Iterator[tuple[Store, int, int]]:
    """Run the handler of ``url``'s scheme; rank/world_size ≥ 0 are added to its query."""
    if not isinstance(url, str):
        raise TypeError(f"rendezvous URL must be a str, got {type(url).__name__}")
    if not isinstance(rank, int) or not isinstance(world_size, int):
        raise TypeError("rank and world_size must be ints")
    parsed = urlparse(url)
    extra = {}
    if rank != -1:
        extra["rank"] = rank
    if world_size != -1:
        extra["world_size"] = world_size
    if extra:
        query = "&".join(q for q in (parsed.query, urlencode(extra)) if q)
        url = urlunparse(parsed._replace(query=query))
    handler = _handlers.get(parsed.scheme)
    if handler is None:
        raise RuntimeError(
            f"no rendezvous handler for {parsed.scheme}:// (init_method={url!r}); "
            f"known: {sorted(s + '://' for s in _handlers)}"
        )
    return handler(url, **kwargs)
