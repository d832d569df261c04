"""The torch-compatible point-to-point functions: send, recv, isend, irecv.

Owns: torch's signatures and return values (recv returns the sender's global rank; -1 on a
non-member). Ranks in signatures are global, as torch's.
"""

from __future__ import annotations

from typing import Any

from ..group import p2p
from ..group.work import Work
from .common import group_rank, resolve_group


def isend(tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Start sending ``tensor`` to ``dst``; the tensor must not change until the Work is done."""
    pg = resolve_group(group, "isend")
    if pg is None:
        return None
    return p2p.isend(pg, tensor, group_rank(pg, dst, group_dst, "dst"), tag)


def irecv(tensor: Any, src: int | None = None, group: Any = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Start receiving into ``tensor`` from ``src`` (None: from any rank of the group)."""
    pg = resolve_group(group, "irecv")
    if pg is None:
        return None
    source = None if src is None and group_src is None else group_rank(pg, src, group_src, "src")
    return p2p.irecv(pg, tensor, source, tag)


def send(tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    """Send ``tensor`` to ``dst``; returns once the data is handed to the transport."""
    pg = resolve_group(group, "send")
    if pg is not None:
        p2p.send(pg, tensor, group_rank(pg, dst, group_dst, "dst"), tag)


def recv(tensor: Any, src: int | None = None, group: Any = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into ``tensor``; returns the sender's global rank (-1 on a non-member)."""
    pg = resolve_group(group, "recv")
    if pg is None:
        return -1
    source = None if src is None and group_src is None else group_rank(pg, src, group_src, "src")
    return pg.global_rank_of(p2p.recv(pg, tensor, source, tag))
