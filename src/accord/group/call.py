"""One call on a process group: its ``Peers`` (``CallPeers``) and how a call is described.

Owns: ``CallPeers``, which maps group ranks to mesh ranks for one collective call and binds
its sequence number, fingerprint and deadline (it is also the call's context in messages),
and ``describe_call`` ('all_reduce #12 (float32, 1024 elements, …)') for mismatch messages.
Must not know about the default world or env variables.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .. import config
from ..arrays import DTYPE_NAMES
from ..collectives.registry import ALGORITHMS, COLLECTIVE_NAMES, COLLECTIVES
from ..timeouts import Deadline
from ..transport.channel import Channel
from ..transport.wire import Fingerprint, FrameKind
from .calls import CallSequencer

_ALGO_NAMES = {(COLLECTIVES[c], a.code): n for c, table in ALGORITHMS.items() for n, a in table.items()}


#: The object collectives share the "object" code; the fingerprint's algo field tells them apart.
OBJECT_CALLS = {
    1: "broadcast_object_list",
    2: "all_gather_object",
    3: "gather_object",
    4: "scatter_object_list",
}


def describe_call(fp: Fingerprint, seq: int) -> str:
    """'all_reduce #12 (float32, 1024 elements, ring)', for mismatch messages."""
    if fp.op == COLLECTIVES["object"]:
        root = f", root {fp.root}" if fp.root >= 0 else ""
        return f"{OBJECT_CALLS.get(fp.algo, 'object collective')} #{seq} ({fp.count} objects{root})"
    name = COLLECTIVE_NAMES.get(fp.op, f"collective {fp.op}")
    parts = (
        [] if fp.dtype == 0 and fp.count == 0 else [DTYPE_NAMES.get(fp.dtype, "?"), f"{fp.count} elements"]
    )
    if fp.root >= 0:
        parts.append(f"root {fp.root}")
    algo = _ALGO_NAMES.get((fp.op, fp.algo))
    if algo:
        parts.append(f"algorithm {algo}")
    return f"{name} #{seq} ({', '.join(parts)})"


def byte_view(array: np.ndarray) -> memoryview:
    """The bytes of a contiguous 1-D array, for the transport."""
    return array.view(np.uint8).data


class CallSite(Protocol):
    """What a call asks of its group (group.process_group.ProcessGroup is one). Declared here
    so that call.py need not import process_group.py, which imports it."""

    members: list[int]  # the members' mesh ranks, in group-rank order (not to be changed)
    calls: CallSequencer
    tunables: config.Tunables

    def rank(self) -> int: ...

    def context(self, op: str, seq: int | None = None) -> str: ...


class CallPeers:
    """The ``Peers`` of one collective call: group ranks → mesh ranks, bound to (seq, fp).

    It is also the call's context for messages: ``str(peers)`` is 'all_reduce #12 on rank 2',
    formatted only when an error needs it.
    """

    __slots__ = (
        "rank",
        "size",
        "tunables",
        "op",
        "_group",
        "_channel",
        "_ranks",
        "_seq",
        "_fp",
        "_deadline",
        "_scratch",
    )

    def __init__(
        self, group: CallSite, channel: Channel, op: str, seq: int, fp: Fingerprint, deadline: Deadline
    ) -> None:
        members = group.members
        self.rank, self.size, self.tunables = group.rank(), len(members), group.tunables
        self._group, self._channel, self._ranks = group, channel, members
        self._scratch = group.calls.scratch
        self.op, self._seq, self._fp, self._deadline = op, seq, fp, deadline

    def __str__(self) -> str:
        return self._group.context(self.op, self._seq)

    def isend(self, peer: int, buf: np.ndarray, step: int) -> Any:
        return self._channel.isend(
            self._ranks[peer], FrameKind.COLL, self._seq, step, 0, self._fp, byte_view(buf), self
        )

    def irecv(self, peer: int, buf: np.ndarray, step: int) -> Any:
        return self._channel.irecv(
            self._ranks[peer], FrameKind.COLL, self._seq, step, 0, self._fp, byte_view(buf), self
        )

    def irecv_any(self, peer: int, step: int) -> Any:
        return self._channel.irecv(
            self._ranks[peer], FrameKind.COLL, self._seq, step, 0, self._fp, None, self
        )

    def wait(self, *handles: Any) -> None:
        self._channel.wait(handles, self._deadline, self)

    def settle(self, *handles: Any) -> None:
        """Wait until each handle ended, well or not, or the call's deadline passed; raises
        only for the group's failure (the caller judges each handle: ``done``, ``error``)."""
        self._channel.settle(handles, self._deadline, self)

    def scratch(self, count: int, dtype: np.dtype, which: int = 0) -> np.ndarray:
        return self._scratch.array(count, dtype, which)
