"""torch's ``*Options`` classes: the arguments of the method-level API (``pg.allreduce(tensors,
opts)``), with torch's field names and defaults.

Owns: ``AllreduceOptions``, ``AllreduceCoalescedOptions``, ``BroadcastOptions``,
``ReduceOptions``, ``AllgatherOptions``, ``GatherOptions``, ``ScatterOptions``,
``ReduceScatterOptions``, ``AllToAllOptions``, ``BarrierOptions`` and ``UNSET_TIMEOUT``.
As torch's: ``asyncOp`` True, ``timeout`` unset (``timedelta(milliseconds=-1)``, the group's
own), ``reduceOp`` SUM, roots 0 (group ranks). Plain Python objects with those attributes;
the method-level API reads its options by attribute (``getattr``), so torch's own option
objects are accepted too. Must not know about groups or how a call runs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..reduce_ops import ReduceOp

#: torch's kUnsetTimeout: the call takes its group's timeout
UNSET_TIMEOUT = timedelta(milliseconds=-1)


class _Options:
    """What every torch option class has: ``timeout`` and ``asyncOp``."""

    def __init__(self) -> None:
        self.timeout: timedelta = UNSET_TIMEOUT
        self.asyncOp: bool = True

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class AllreduceOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.reduceOp: Any = ReduceOp.SUM


class AllreduceCoalescedOptions(AllreduceOptions):
    """As torch's: an ``AllreduceOptions`` for ``allreduce_coalesced``."""


class BroadcastOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.rootRank: int = 0
        self.rootTensor: int = 0


class ReduceOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.reduceOp: Any = ReduceOp.SUM
        self.rootRank: int = 0
        self.rootTensor: int = 0


class AllgatherOptions(_Options):
    pass


class GatherOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.rootRank: int = 0


class ScatterOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.rootRank: int = 0


class ReduceScatterOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.reduceOp: Any = ReduceOp.SUM


class AllToAllOptions(_Options):
    pass


class BarrierOptions(_Options):
    def __init__(self) -> None:
        super().__init__()
        self.device_ids: list[int] = []
        self.device: Any = None


def timeout_seconds(opts: Any) -> float | None:
    """An option object's timeout in seconds, or None when unset (zero or negative)."""
    timeout = getattr(opts, "timeout", None)
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return seconds if seconds > 0 else None
