"""The environment accordrun gives each worker: torchrun's contract, in one table.

Owns: the names and values of the variables written for a worker, and nothing else. Must not
know how the values were agreed (rendezvous) or how the worker is started.

==============================  ===============================================================
variable                        value
==============================  ===============================================================
RANK                            global rank: the ranks of lower nodes come first
LOCAL_RANK                      rank on this node, 0 … LOCAL_WORLD_SIZE-1
WORLD_SIZE                      workers in the job, all nodes
LOCAL_WORLD_SIZE                workers on this node (--nproc-per-node)
GROUP_RANK                      this node's rank (static: --node-rank; c10d: arrival order)
GROUP_WORLD_SIZE                nodes in the job
ROLE_NAME                       --role (default "default")
ROLE_RANK                       rank among the workers of this role (all nodes)
ROLE_WORLD_SIZE                 workers of this role (all nodes)
MASTER_ADDR, MASTER_PORT        the store the launchers share (node 0's or --rdzv-endpoint's);
                                workers connect to it as clients (accord's and torch's alike:
                                it speaks torch's TCPStore protocol)
TORCHELASTIC_USE_AGENT_STORE    "True": env:// connects to the launcher's store (accord: keys
                                under /worker/attempt_<TORCHELASTIC_RESTART_COUNT>)
TORCHELASTIC_RUN_ID             --rdzv-id (a fresh uuid with --standalone / one node)
TORCHELASTIC_RESTART_COUNT      restarts so far (after failures, lost nodes, nodes joining),
                                the same on every node: 0 on the first attempt
TORCHELASTIC_MAX_RESTARTS       --max-restarts
TORCHELASTIC_ERROR_FILE         where the worker's uncaught exception is written as JSON
TORCHELASTIC_SIGNALS_TO_HANDLE  --signals-to-handle
ACCORD_JOIN                     "1" for a worker started in the place of one that died
                                (--replace-workers): init_process_group joins the running
                                job; removed from every other worker's environment
TORCH_NCCL_ASYNC_ERROR_HANDLING "1" unless set (as torchrun; accord does not read it)
OMP_NUM_THREADS                 "1" unless set, when a node runs several workers (as torchrun)
==============================  ===============================================================

A replacement gets the environment of the worker it replaces: the same ``LOCAL_RANK`` and
``RANK`` (the place it takes, whatever rank the job gives it: ``get_rank()`` says, as it does
for the ranks a ``shrink_group`` renumbered), the same ``WORLD_SIZE`` (the size the job grows
back to) and ``TORCHELASTIC_RESTART_COUNT`` (the attempt's: its store keys are under
``/worker/attempt_<n>``), with ``ACCORD_JOIN=1``.

Everything else is inherited from the launcher's environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerPlace:
    """Where one worker sits in the job for one attempt."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    group_rank: int
    group_world_size: int
    role_rank: int
    role_world_size: int


@dataclass(frozen=True)
class JobFacts:
    """What every worker of one attempt on one node shares."""

    role: str
    master_addr: str
    master_port: int
    run_id: str
    restart_count: int
    max_restarts: int
    signals: str


def worker_env(
    base: Mapping[str, str], place: WorkerPlace, job: JobFacts, error_file: str, joining: bool = False
) -> dict[str, str]:
    """``base`` (the launcher's environment) with the contract above written over it
    (``joining``: for a replacement)."""
    env = dict(base)
    env.pop("ACCORD_JOIN", None)  # config.JOIN
    if joining:
        env["ACCORD_JOIN"] = "1"
    env.update(
        {
            "RANK": str(place.rank),
            "LOCAL_RANK": str(place.local_rank),
            "WORLD_SIZE": str(place.world_size),
            "LOCAL_WORLD_SIZE": str(place.local_world_size),
            "GROUP_RANK": str(place.group_rank),
            "GROUP_WORLD_SIZE": str(place.group_world_size),
            "ROLE_NAME": job.role,
            "ROLE_RANK": str(place.role_rank),
            "ROLE_WORLD_SIZE": str(place.role_world_size),
            "MASTER_ADDR": job.master_addr,
            "MASTER_PORT": str(job.master_port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RUN_ID": job.run_id,
            "TORCHELASTIC_RESTART_COUNT": str(job.restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(job.max_restarts),
            "TORCHELASTIC_ERROR_FILE": error_file,
            "TORCHELASTIC_SIGNALS_TO_HANDLE": job.signals,
        }
    )
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    if place.local_world_size > 1 and not env.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = "1"
    return env
