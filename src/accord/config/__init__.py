"""Every environment variable accord reads, in one place, with its default and meaning.

Owns: the names, parsing and documentation of environment variables. Nothing else in accord
reads ``os.environ``, except the launcher, which *writes* the worker contract; the one
variable written here is torch's ``THP_MEM_ALLOC_ENABLE`` (``prefer_huge_pages``). Values are read
at call time, so tests can set them with ``monkeypatch.setenv``.

``python -m accord.config`` prints the table below with the values seen now. The variables
launchers set (``launchers.py``), those of accord beside other frameworks (``integrations.py``)
and the ``Setting`` record (``setting.py``) live beside this module; every one is importable
from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Grouped by launcher (torchrun, Slurm, Open MPI, PMI, MVAPICH), not sorted or one per line:
# isort: off
# fmt: off
from .launchers import (  # noqa: F401 — re-exported: config.MASTER_ADDR and the rest
    MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT,
    TORCHELASTIC_ERROR_FILE, LOG_LINE_PREFIX_TEMPLATE, SHUTDOWN_TIMEOUT, OMP_NUM_THREADS,
    HEARTBEAT_TIMEOUT, JOIN, PET_OPTIONS,
    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS_PER_NODE,
    SLURM_TASKS_PER_NODE, SLURM_NODELIST, SLURM_JOB_ID,
    OMPI_RANK, OMPI_SIZE, OMPI_LOCAL_RANK, OMPI_LOCAL_SIZE,
    PMI_RANK, PMI_SIZE, MPI_LOCAL_RANK, MPI_LOCAL_SIZE,
    MV2_RANK, MV2_SIZE, MV2_LOCAL_RANK, MV2_LOCAL_SIZE,
)
# fmt: on
# isort: on
from .integrations import TORCH_DEFAULT_GROUP, torch_default_group  # noqa: F401 — re-exported
from .setting import SETTINGS, Setting, describe  # noqa: F401 — re-exported
from .setting import register as _setting

# -- store -----------------------------------------------------------------------------------
STORE_EXIT_GRACE = _setting(
    "ACCORD_STORE_EXIT_GRACE",
    "5",
    "Seconds a process hosting a TCPStore server keeps serving, when it closes the store or "
    "exits, until the clients of other processes have disconnected (0: stop at once). A rank "
    "that finishes first then does not take the store from ranks still reading it.",
)

# -- torch's allocator -------------------------------------------------------------------------
TORCH_HUGE_PAGES = _setting(
    "THP_MEM_ALLOC_ENABLE",
    "1",
    "torch's own setting: back CPU tensors of >= 2 MiB with transparent huge pages. "
    "init_process_group sets it to 1 unless it is set already (0 opts out); torch reads it "
    "once, at its first large allocation. accord's single-copy path moves huge pages about "
    "twice as fast as 4 KiB ones.",
)

# -- transport ---------------------------------------------------------------------------------
SOCKET_IFNAME = _setting(
    "ACCORD_SOCKET_IFNAME",
    None,
    "Network interface whose IPv4 address the TCP transport binds and publishes "
    "(e.g. eth0). Default: the address this host uses to reach the store.",
    aliases=("GLOO_SOCKET_IFNAME",),
)
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
    "Shared-memory groups read large buffers straight from a peer's memory "
    "(process_vm_readv) when the kernel allows it; 0 turns this off.",
)
SPREAD = _setting(
    "ACCORD_SPREAD",
    "1",
    "A rank stalled beside a local peer on its CPU moves "
    "to another CPU it may use (mask kept); 0 leaves placement to the kernel.",
)
SHM_RING_BYTES = _setting(
    "ACCORD_SHM_RING_BYTES",
    str(1 << 20),
    "Capacity of each shared-memory ring carrying point-to-point messages between two ranks "
    "of one host (one ring per direction).",
)
TCP_BUFFER_BYTES = _setting(
    "ACCORD_TCP_BUFFER_BYTES", str(4 << 20), "SO_SNDBUF/SO_RCVBUF requested for transport sockets."
)
PEER_LOST_TIMEOUT = _setting(
    "ACCORD_PEER_LOST_TIMEOUT",
    "7",
    "Seconds a peer's host may leave the rank-to-rank TCP links unanswered (no acknowledgement "
    "of data in flight or of keepalive probes) before its ranks are named lost: calls raise "
    "PeerError naming them instead of waiting for their timeout (a host lost to power loss, "
    "a pulled cable or a partition closes no connection). A stopped or busy process is still "
    "answered for by its kernel and waited for until the timeout. 0: off; else at least 2.",
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
DEBUG = _setting(
    "ACCORD_DEBUG",
    "OFF",
    "OFF, INFO or DETAIL (also read from TORCH_DISTRIBUTED_DEBUG). INFO logs each group's "
    "communication statistics when it is destroyed; DETAIL also checks every collective's "
    "arguments across ranks before it runs (shapes of every list element, split sizes, ops, "
    "roots) and logs each call's time.",
    aliases=("TORCH_DISTRIBUTED_DEBUG",),
)
FLIGHT_RECORDER_SIZE = _setting(
    "ACCORD_FLIGHT_RECORDER_SIZE",
    "2000",
    "Calls each group's flight recorder keeps (the newest ones).",
)
FLIGHT_RECORDER_DIR = _setting(
    "ACCORD_FLIGHT_RECORDER_DIR",
    None,
    "Where flight-recorder dumps go (one rank<N>.json per rank; 'off' disables the automatic "
    "dumps). Default: <tmp>/accord-flight-recorder/<job>, the job being TORCHELASTIC_RUN_ID, "
    "else rank 0's start time and pid (shared through the store at init).",
)
PROGRESS_INTERVAL = _setting(
    "ACCORD_PROGRESS_INTERVAL",
    "1.0",
    "Seconds between the checks of a background thread that publishes, in the store, where "
    "this rank is on each group once that stopped changing (what a timed-out rank's stuck "
    "report reads). 0 turns publishing off.",
)
FAIL_FAST = _setting(
    "ACCORD_FAIL_FAST",
    "1",
    "1: an uncaught exception on a rank (main thread) tells the other ranks at once, naming "
    "it, before the interpreter exits; 0: the peers only learn when the process is gone.",
)

MPI_CHECKS = _setting(
    "ACCORD_MPI_CHECKS",
    "1",
    "Backend mpi: 1 checks before every collective that all ranks called the same one "
    "(one small MPI all_reduce more per call; a mismatch is an error, not a hang); 0 skips it.",
)
NCCL_STANDIN = _setting(
    "ACCORD_NCCL_STANDIN",
    None,
    "For machines without a GPU (tests): 'gloo' makes the cuda:nccl device groups torch's "
    "ProcessGroupGloo, carrying CPU torch tensors, so the routing runs without CUDA.",
)


def flight_recorder_size() -> int:
    return _as_int(FLIGHT_RECORDER_SIZE, minimum=1)


def debug_level_name() -> str:
    """ACCORD_DEBUG / TORCH_DISTRIBUTED_DEBUG, upper-cased and checked."""
    value = (DEBUG.raw() or "OFF").upper()
    if value not in ("OFF", "INFO", "DETAIL"):
        raise ValueError(f"ACCORD_DEBUG / TORCH_DISTRIBUTED_DEBUG={value!r}: expected OFF, INFO or DETAIL")
    return value


def flight_recorder_dir() -> str | None:
    """Where automatic dumps go: the variable, the default (None: compute it), or '' (off)."""
    raw = FLIGHT_RECORDER_DIR.raw()
    if raw is not None and raw.lower() in ("off", "0", "none", "false"):
        return ""
    return raw


def run_id() -> str | None:
    """TORCHELASTIC_RUN_ID: the launcher's name for this job (None without a launcher)."""
    return TORCHELASTIC_RUN_ID.raw()


def progress_interval() -> float:
    return env_float(PROGRESS_INTERVAL)


def fail_fast() -> bool:
    return (FAIL_FAST.raw() or "1").lower() not in ("0", "false", "no", "off")


def nccl_standin() -> str | None:
    value = (NCCL_STANDIN.raw() or "").lower()
    if value in ("", "0", "off", "none"):
        return None
    if value != "gloo":
        raise ValueError(f"ACCORD_NCCL_STANDIN={value!r}: expected 'gloo' or unset")
    return value


def joining() -> bool:
    """ACCORD_JOIN: whether init_process_group joins a running job (a launcher's replacement)."""
    return (JOIN.raw() or "0").lower() not in ("0", "false", "no", "off")


def mpi_checks() -> bool:
    return (MPI_CHECKS.raw() or "1").lower() not in ("0", "false", "no", "off")


def _as_int(setting: Setting, minimum: int = 0) -> int:
    raw = setting.raw()
    text = raw if raw is not None else setting.default
    assert text is not None, setting.name
    try:
        value = int(text, 0)
    except ValueError:
        raise ValueError(f"{setting.name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{setting.name}={value} must be >= {minimum}")
    return value


def tcp_buffer_bytes() -> int:
    return _as_int(TCP_BUFFER_BYTES, minimum=4096)


def peer_lost_timeout() -> float:
    """ACCORD_PEER_LOST_TIMEOUT in seconds; 0 when off."""
    value = env_float(PEER_LOST_TIMEOUT)
    if 0 < value < 2:
        raise ValueError(
            f"environment variable {PEER_LOST_TIMEOUT.name}={value:g}: expected 0 (off) or at least 2"
        )
    return value


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


def shm_ring_bytes() -> int:
    return _as_int(SHM_RING_BYTES, minimum=4096)


def spread() -> bool:
    return _on(SPREAD)


def socket_ifname() -> str | None:
    return SOCKET_IFNAME.raw()


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
            _on(CMA),
            flight_recorder_size(),
            _on(HIERARCHY),
            hierarchy_pipeline_bytes(),
            spread(),
            os.cpu_count() or 0,
        )


def _on(setting: Setting) -> bool:
    return (setting.raw() or "1").lower() not in ("0", "false", "no", "off")


def env_int(setting: Setting) -> int | None:
    """An integer variable of the env:// contract; None when unset.

    Raises:
        ValueError: set but not an integer (the message names the variable).
    """
    raw = setting.raw()
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {setting.name}={raw!r} is not an integer") from None


def env_float(setting: Setting, minimum: float = 0.0) -> float:
    """A number of seconds (or any float) from ``setting``, else its default.

    Raises:
        ValueError: not a number, or below ``minimum`` (the message names the variable).
    """
    text = setting.raw() or setting.default
    assert text is not None, setting.name
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"environment variable {setting.name}={text!r} is not a number") from None
    if value < minimum:
        raise ValueError(f"environment variable {setting.name}={value:g} must be >= {minimum:g}")
    return value


def store_exit_grace() -> float:
    return env_float(STORE_EXIT_GRACE)


def prefer_huge_pages() -> None:
    """Ask torch's CPU allocator to back large tensors (>= 2 MiB) with transparent huge pages,
    as NumPy does by default, unless ``THP_MEM_ALLOC_ENABLE`` is set (``0`` opts out). torch
    reads it once, at its first large allocation: this helps tensors made after
    ``init_process_group``. The single-copy path moves huge pages about twice as fast
    (broadcast 16 MiB at world 2: 2.7 ms -> 1.6 ms). torch is not imported here."""
    if TORCH_HUGE_PAGES.raw() is None:
        os.environ[TORCH_HUGE_PAGES.name] = "1"


def launcher_option_default(dest: str) -> str | None:
    """torchrun's ``PET_<OPTION>`` default for a launcher option (``nproc_per_node`` reads
    PET_NPROC_PER_NODE); None when unset."""
    return Setting(f"PET_{dest.upper()}", None, PET_OPTIONS.doc).raw()
