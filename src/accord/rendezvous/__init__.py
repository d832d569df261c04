"""Rendezvous: turn an init_method URL (or the environment) into (store, rank, world_size)."""

from . import handlers as _handlers  # noqa: F401 — registers env://, tcp://, file://
from .registry import register_rendezvous_handler, rendezvous

__all__ = ["register_rendezvous_handler", "rendezvous"]
