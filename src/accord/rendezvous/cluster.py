"""Where rank and world size come from when a cluster launcher, not torchrun, started us.

Owns: reading SLURM's and mpiexec's variables (through ``config``) into a ``ClusterEnv``,
SLURM hostlist expansion (``node[01-04,07]`` → node01 … node07) and tasks-per-node specs
(``2(x3),1``), and the list of variables looked at, for error messages. Must not know about
stores, transports or the launcher.

Precedence: an MPI launcher's variables win over SLURM's, because ``mpiexec`` run inside a
SLURM batch script inherits the batch step's ``SLURM_PROCID=0`` on every rank.

============  ==========================  ===========================  =========================
source        rank / world size           local rank / local size      MASTER_ADDR / MASTER_PORT
============  ==========================  ===========================  =========================
Open MPI      OMPI_COMM_WORLD_RANK/SIZE   OMPI_COMM_WORLD_LOCAL_RANK/  —
                                          LOCAL_SIZE
MPICH, Intel  PMI_RANK, PMI_SIZE          MPI_LOCALRANKID/LOCALNRANKS  —
MVAPICH       MV2_COMM_WORLD_RANK/SIZE    MV2_COMM_WORLD_LOCAL_*       —
SLURM (srun)  SLURM_PROCID, SLURM_NTASKS  SLURM_LOCALID, SLURM_NTASKS  first host of SLURM_STEP_/
                                          _PER_NODE or SLURM_STEP_     JOB_NODELIST; 15000 + last
                                          TASKS_PER_NODE + NODEID      4 digits of SLURM_JOB_ID
============  ==========================  ===========================  =========================
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from .. import config

#: (name, rank, size, local rank, local size), in order of precedence.
_MPI_SOURCES = (
    ("Open MPI", config.OMPI_RANK, config.OMPI_SIZE, config.OMPI_LOCAL_RANK, config.OMPI_LOCAL_SIZE),
    ("MPICH/Intel MPI", config.PMI_RANK, config.PMI_SIZE, config.MPI_LOCAL_RANK, config.MPI_LOCAL_SIZE),
    ("MVAPICH", config.MV2_RANK, config.MV2_SIZE, config.MV2_LOCAL_RANK, config.MV2_LOCAL_SIZE),
)
RANK_VARIABLES = ("RANK", *(s[1].name for s in _MPI_SOURCES), "SLURM_PROCID")
SIZE_VARIABLES = ("WORLD_SIZE", *(s[2].name for s in _MPI_SOURCES), "SLURM_NTASKS")
ADDR_VARIABLES = ("MASTER_ADDR", *config.SLURM_NODELIST.aliases, config.SLURM_NODELIST.name)
PORT_VARIABLES = ("MASTER_PORT", "SLURM_JOB_ID")


@dataclass(frozen=True)
class ClusterEnv:
    """What a cluster launcher told this process; None where it says nothing."""

    source: str
    rank: int | None
    world_size: int | None
    local_rank: int | None = None
    local_world_size: int | None = None
    master_addr: str | None = None
    master_port: int | None = None


def detect() -> ClusterEnv | None:
    """The first cluster launcher whose rank variable is set (MPI before SLURM), or None."""
    for name, rank, size, local_rank, local_size in _MPI_SOURCES:
        if rank.raw() is not None:
            return ClusterEnv(
                name,
                config.env_int(rank),
                config.env_int(size),
                config.env_int(local_rank),
                config.env_int(local_size),
            )
    if config.SLURM_PROCID.raw() is not None:
        return _slurm()
    return None


def _slurm() -> ClusterEnv:
    nodelist = config.SLURM_NODELIST.raw()
    hosts = expand_hostlist(nodelist) if nodelist else []
    job_id = config.SLURM_JOB_ID.raw()
    port = 15000 + int(job_id[-4:]) if job_id and job_id[-4:].isdigit() else None
    return ClusterEnv(
        "SLURM",
        config.env_int(config.SLURM_PROCID),
        config.env_int(config.SLURM_NTASKS),
        config.env_int(config.SLURM_LOCALID),
        _slurm_local_size(),
        hosts[0] if hosts else None,
        port,
    )


def _slurm_local_size() -> int | None:
    per_node = config.SLURM_NTASKS_PER_NODE.raw()
    if per_node is not None and per_node.isdigit():
        return int(per_node)
    spec = config.SLURM_TASKS_PER_NODE.raw()
    node = config.env_int(config.SLURM_NODEID)
    if spec is None:
        return None
    counts = expand_tasks_per_node(spec)
    if node is None:
        return counts[0] if len(set(counts)) == 1 else None
    return counts[node] if 0 <= node < len(counts) else None


_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_tasks_per_node(spec: str) -> list[int]:
    """SLURM's tasks-per-node spec, one count per node: ``'2(x3),1'`` → ``[2, 2, 2, 1]``.

    Raises:
        ValueError: a malformed spec (the message quotes it).
    """
    counts: list[int] = []
    for item in spec.split(","):
        match = _TASKS.match(item.strip())
        if match is None:
            raise ValueError(
                f"SLURM tasks-per-node spec {spec!r}: cannot read {item!r}; expected e.g. '2(x3),1'"
            )
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets: 'a[1,2],b' → ['a[1,2]', 'b']."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"SLURM hostlist {text!r}: unbalanced or nested brackets")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"SLURM hostlist {text!r}: a '[' is never closed")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_range(body: str, hostlist: str) -> list[str]:
    """The inside of one bracket: '01-03,07' → ['01', '02', '03', '07'] (zero padding kept)."""
    values: list[str] = []
    for part in body.split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"SLURM hostlist {hostlist!r}: cannot read range {part!r}")
        if not sep:
            values.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"SLURM hostlist {hostlist!r}: range {part!r} runs backwards")
        values += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return values


def expand_hostlist(hostlist: str) -> list[str]:
    """SLURM's compressed host list, expanded as ``scontrol show hostnames`` does.

    ``'node[01-03,07],login1'`` → node01 node02 node03 node07 login1; several brackets in one
    name expand as a product (``'r[1-2]-n[1-2]'`` → r1-n1 r1-n2 r2-n1 r2-n2).

    Raises:
        ValueError: malformed brackets or ranges (the message quotes the list).
    """
    hosts: list[str] = []
    for item in _split_top_level(hostlist):
        pieces = re.split(r"\[([^\]]*)\]", item)  # text, range, text, range, …, text
        choices = [
            [piece] if i % 2 == 0 else _expand_range(piece, hostlist) for i, piece in enumerate(pieces)
        ]
        hosts += ["".join(parts) for parts in itertools.product(*choices)]
    return hosts
