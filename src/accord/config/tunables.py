"""The settings a process group reads once, when it is created, and the ``Tunables`` record
that carries them to the algorithms: the transport's choice and shared-memory slots, the
algorithm overrides and size thresholds, the hierarchy, CPU placement and the flight
recorder's length. Re-exported by ``accord.config``, whose ``describe`` lists these settings
with the others. Must not know how the algorithms use them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .setting import as_int as _as_int
from .setting import is_on
from .setting import register as _setting

# -- transport ---------------------------------------------------------------------------------
TRANSPORT = _setting(
    "ACCORD_TRANSPORT",
    "auto",
    "'auto': shared memory between ranks of one host, TCP between hosts; 'tcp': TCP only "
    "(for comparison and tests).",
)
SHM_SLOT_BYTES = _setting(
    "ACCORD_SHM_SLOT_BYTES",
    str(4 << 20),
    "Size of each of the two shared-memory slots per rank and group; larger messages go in "
    "chunks of this size.",
)
CMA = _setting(
    "ACCORD_CMA",
    "1",
    "Shared-memory groups read and write large buffers straight in a peer's memory "
    "(process_vm_readv, process_vm_writev) when the kernel allows it; 0 turns this off.",
)
SPREAD = _setting(
    "ACCORD_SPREAD",
    "1",
    "A rank stalled beside a local peer on its CPU moves "
    "to another CPU it may use (mask kept); 0 leaves placement to the kernel.",
)

# -- algorithms --------------------------------------------------------------------------------
ALGORITHM = _setting(
    "ACCORD_ALGORITHM",
    None,
    "Force algorithms by collective, e.g. 'all_reduce=ring,broadcast=binomial'. "
    "Unknown names raise an error listing the known ones.",
)
HIERARCHY = _setting(
    "ACCORD_HIERARCHY",
    "1",
    "1: a group whose members span hosts (the same number on each) runs all_reduce, "
    "broadcast, all_gather, reduce_scatter and barrier in two levels: shared memory inside "
    "each host, the network between hosts. 0: flat algorithms over every link.",
)
HIERARCHY_PIPELINE_BYTES = _setting(
    "ACCORD_HIERARCHY_PIPELINE_BYTES",
    "auto",
    "Two-level all_reduce in pieces of this size (at most 32): one piece crosses the network "
    "while the next is reduced inside each host and the one before is spread. 0: one piece. "
    "auto: the first three all_reduces of 4 MiB or more are timed stage by stage; then the "
    "members pipeline if the network is the slow stage (3x the host's stages, 1x where each "
    "host has two cores per local rank), in pieces the network moves in about 2 ms "
    "(README, hierarchy).",
)
SEGMENT_BYTES = _setting(
    "ACCORD_SEGMENT_BYTES",
    str(1 << 20),
    "Pipelining segment of the bandwidth algorithms (ring all_reduce, pipelined broadcast).",
)
SMALL_MESSAGE_BYTES = _setting(
    "ACCORD_SMALL_MESSAGE_BYTES",
    str(64 << 10),
    "At or below this size the latency algorithms are chosen (recursive doubling, binomial tree).",
)

# -- diagnostics -------------------------------------------------------------------------------
FLIGHT_RECORDER_SIZE = _setting(
    "ACCORD_FLIGHT_RECORDER_SIZE",
    "2000",
    "Calls each group's flight recorder keeps (the newest ones).",
)


def flight_recorder_size() -> int:
    return _as_int(FLIGHT_RECORDER_SIZE, minimum=1)


def segment_bytes() -> int:
    return _as_int(SEGMENT_BYTES, minimum=1)


def hierarchy_pipeline_bytes() -> int | None:
    """ACCORD_HIERARCHY_PIPELINE_BYTES; None for auto (the hierarchy measures its stages, then decides)."""
    if (HIERARCHY_PIPELINE_BYTES.raw() or "auto").strip().lower() == "auto":
        return None
    return _as_int(HIERARCHY_PIPELINE_BYTES, minimum=0)


def small_message_bytes() -> int:
    return _as_int(SMALL_MESSAGE_BYTES, minimum=0)


def transport() -> str:
    value = (TRANSPORT.raw() or "auto").lower()
    if value not in ("auto", "tcp"):
        raise ValueError(f"ACCORD_TRANSPORT={value!r}: expected 'auto' or 'tcp'")
    return value


def shm_slot_bytes() -> int:
    value = _as_int(SHM_SLOT_BYTES, minimum=4096)
    return (value + 4095) // 4096 * 4096


def spread() -> bool:
    return is_on(SPREAD)


def algorithm_overrides() -> dict[str, str]:
    """ACCORD_ALGORITHM parsed into {collective: algorithm name}."""
    raw = ALGORITHM.raw()
    if raw is None:
        return {}
    overrides: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        collective, sep, name = item.partition("=")
        if not sep or not collective.strip() or not name.strip():
            raise ValueError(f"ACCORD_ALGORITHM={raw!r}: expected 'collective=algorithm[,…]', got {item!r}")
        overrides[collective.strip()] = name.strip()
    return overrides


@dataclass(frozen=True)
class Tunables:
    """The algorithm settings a process group reads once, when it is created."""

    segment_bytes: int
    small_message_bytes: int
    algorithms: dict[str, str]
    transport: str = "auto"
    shm_slot_bytes: int = 4 << 20
    cma: bool = True
    flight_recorder_size: int = 2000
    hierarchy: bool = True
    hierarchy_pipeline_bytes: int | None = None  # None: auto
    spread: bool = True
    #: CPUs of this host (os.cpu_count: the same for every process on it, so every member
    #: of a group chooses alike); 0: unknown. Algorithm rules compare it with the group size.
    host_cpus: int = 0

    @classmethod
    def from_env(cls) -> Tunables:
        return cls(
            segment_bytes(),
            small_message_bytes(),
            algorithm_overrides(),
            transport(),
            shm_slot_bytes(),
            is_on(CMA),
            flight_recorder_size(),
            is_on(HIERARCHY),
            hierarchy_pipeline_bytes(),
            spread(),
            os.cpu_count() or 0,
        )
