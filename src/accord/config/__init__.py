"""Every environment variable accord reads, in one place, with its default and meaning.

Owns: the names, parsing and documentation of environment variables. Nothing else in accord
reads ``os.environ``, except the launcher, which *writes* the worker contract; the one
variable written here is torch's ``THP_MEM_ALLOC_ENABLE`` (``prefer_huge_pages``). Values are read
at call time, so tests can set them with ``monkeypatch.setenv``.

``python -m accord.config`` prints the table below with the values seen now. The variables
launchers set (``launchers.py``), those of accord beside other frameworks (``integrations.py``),
the settings a process group reads once and their ``Tunables`` record (``tunables.py``), and
the ``Setting`` record with its parsers (``setting.py``) live beside this module; every one is
importable from here.
"""

from __future__ import annotations

import os
import tempfile

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
from .integrations import TORCH_DEFAULT_GROUP, TORCH_HEAP, torch_default_group  # noqa: F401 — re-exported
from .setting import SETTINGS, Setting, describe, env_float, env_int, is_on  # noqa: F401 — re-exported
from .setting import as_int as _as_int
from .setting import register as _setting

# The settings a process group reads once, and the record that carries them: tunables.py.
from .tunables import (  # noqa: F401 — re-exported: config.Tunables, config.segment_bytes, …
    ALGORITHM,
    CMA,
    FLIGHT_RECORDER_SIZE,
    HIERARCHY,
    HIERARCHY_PIPELINE_BYTES,
    SEGMENT_BYTES,
    SHM_SLOT_BYTES,
    SMALL_MESSAGE_BYTES,
    SPREAD,
    TRANSPORT,
    Tunables,
    algorithm_overrides,
    flight_recorder_size,
    hierarchy_pipeline_bytes,
    segment_bytes,
    shm_slot_bytes,
    small_message_bytes,
    spread,
    transport,
)

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
FLIGHT_RECORDER_DIR = _setting(
    "ACCORD_FLIGHT_RECORDER_DIR",
    None,
    "Where flight-recorder dumps go (one rank<N>.json per rank; 'off' disables the automatic "
    "dumps). Default: <tmp>/accord-flight-recorder/<job>, the job being TORCHELASTIC_RUN_ID, "
    "else rank 0's start time and pid (shared through the store at init).",
)
PROGRESS_INTERVAL = _setting(
    "ACCORD_PROGRESS_INTERVAL",
    "0.5",
    "Seconds between the checks of a background thread that publishes, in the store, where "
    "this rank is on each group once that stopped changing (what a timed-out rank's stuck "
    "report and 'accord top' read: a rank stuck in a call shows within two intervals). "
    "0 turns publishing off.",
)
JOBS_DIR = _setting(
    "ACCORD_JOBS_DIR",
    None,
    "Where accordrun writes a file per running job (its store's address and, for a secret "
    "it made, the secret; mode 600) so that 'accord top' finds the job. Default: "
    "$XDG_RUNTIME_DIR/accord-jobs, else <tmp>/accord-jobs-<uid>. 'off': write none.",
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


def jobs_dir() -> str:
    """Where job files go (``rendezvous/job_files``); "" when turned off."""
    raw = JOBS_DIR.raw()
    if raw is not None:
        return "" if raw.lower() in ("off", "0", "none", "false") else raw
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "accord-jobs")
    return os.path.join(tempfile.gettempdir(), f"accord-jobs-{os.getuid()}")


def fail_fast() -> bool:
    return is_on(FAIL_FAST)


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
    return is_on(MPI_CHECKS)


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


def shm_ring_bytes() -> int:
    return _as_int(SHM_RING_BYTES, minimum=4096)


def socket_ifname() -> str | None:
    return SOCKET_IFNAME.raw()


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
