"""The variables launchers set for their workers: torchrun's env:// contract, torchelastic's
extras, and the ranks SLURM and the MPI launchers (Open MPI, MPICH/Intel MPI, MVAPICH) give
each process. Read by rendezvous and the launcher; registered before accord's own settings,
so ``describe`` lists them first. Must not know how they are used.
"""

from __future__ import annotations

from .setting import register as _setting

# -- the torchrun / env:// contract (read by rendezvous) ---------------------------------------
MASTER_ADDR = _setting("MASTER_ADDR", None, "env:// rendezvous: host of the rank-0 TCPStore.")
MASTER_PORT = _setting("MASTER_PORT", None, "env:// rendezvous: port of the rank-0 TCPStore.")
RANK = _setting("RANK", None, "env:// rendezvous: this process's global rank.")
WORLD_SIZE = _setting("WORLD_SIZE", None, "env:// rendezvous: number of processes in the job.")
LOCAL_RANK = _setting("LOCAL_RANK", None, "Rank of this process on its host (set by launchers).")
LOCAL_WORLD_SIZE = _setting("LOCAL_WORLD_SIZE", None, "Number of processes on this host (launchers).")
TORCHELASTIC_RUN_ID = _setting(
    "TORCHELASTIC_RUN_ID", None, "Set by torchrun/accordrun; makes is_torchelastic_launched() true."
)

# -- launchers: torchelastic, SLURM, mpiexec (read by rendezvous/ and launcher/) ---------------
# The variables accordrun *writes* for its workers are tabled in accord/launcher/env.py.
TORCHELASTIC_USE_AGENT_STORE = _setting(
    "TORCHELASTIC_USE_AGENT_STORE",
    None,
    "'True' (set by accordrun/torchrun): the launcher hosts the TCPStore at MASTER_ADDR:"
    "MASTER_PORT, every rank connects as a client, keys live under /worker/attempt_<n>.",
)
TORCHELASTIC_RESTART_COUNT = _setting(
    "TORCHELASTIC_RESTART_COUNT", "0", "Restarts of the worker group so far (set by launchers)."
)
TORCHELASTIC_ERROR_FILE = _setting(
    "TORCHELASTIC_ERROR_FILE",
    None,
    "Where a worker's uncaught exception is written as JSON (torchrun's format); accordrun sets "
    "it per worker and its bootstrap (launcher/worker.py, stdlib only) writes it.",
)
LOG_LINE_PREFIX_TEMPLATE = _setting(
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
    None,
    "accordrun: prefix of each worker output line, with ${rank}, ${local_rank}, ${role_name}; "
    "default '[rank${rank}]: '.",
)
SHUTDOWN_TIMEOUT = _setting(
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
    "30",
    "accordrun: seconds from SIGTERM to SIGKILL when stopping workers (--shutdown-timeout wins).",
)
OMP_NUM_THREADS = _setting(
    "OMP_NUM_THREADS", None, "accordrun sets 1 for its workers when unset (as torchrun)."
)
HEARTBEAT_TIMEOUT = _setting(
    "ACCORD_LAUNCHER_HEARTBEAT_TIMEOUT",
    "5",
    "accordrun, several nodes: seconds without a heartbeat (each launcher beats every tenth of "
    "it) before another node's launcher counts as lost: its node leaves the job.",
)
JOIN = _setting(
    "ACCORD_JOIN",
    None,
    "'1' (set by accordrun --replace-workers for a worker it starts in place of one that died): "
    "init_process_group joins the running job (join_process_group on the job's store, "
    "admitted when its ranks call grow_group) instead of starting one; get_rank() then says "
    "which rank the job gave it.",
)
PET_OPTIONS = _setting(
    "PET_<OPTION>",
    None,
    "accordrun, as torchrun: PET_NNODES, PET_NPROC_PER_NODE, PET_RDZV_ENDPOINT … give defaults "
    "for the options of the same name.",
)
SLURM_PROCID = _setting("SLURM_PROCID", None, "SLURM: global rank (env:// when RANK is unset).")
SLURM_NTASKS = _setting(
    "SLURM_NTASKS", None, "SLURM: world size (when WORLD_SIZE is unset).", aliases=("SLURM_NPROCS",)
)
SLURM_LOCALID = _setting("SLURM_LOCALID", None, "SLURM: rank on this node.")
SLURM_NODEID = _setting("SLURM_NODEID", None, "SLURM: index of this node in the step.")
SLURM_NTASKS_PER_NODE = _setting("SLURM_NTASKS_PER_NODE", None, "SLURM: ranks per node.")
SLURM_TASKS_PER_NODE = _setting(
    "SLURM_STEP_TASKS_PER_NODE",
    None,
    "SLURM: ranks per node, e.g. '2(x3),1'.",
    aliases=("SLURM_TASKS_PER_NODE",),
)
SLURM_NODELIST = _setting(
    "SLURM_STEP_NODELIST",
    None,
    "SLURM: hosts, e.g. 'node[01-04,07]'; the first one is MASTER_ADDR when that is unset.",
    aliases=("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
)
SLURM_JOB_ID = _setting(
    "SLURM_JOB_ID",
    None,
    "SLURM: when MASTER_PORT is unset it is 15000 + the job id's last 4 digits (as Lightning).",
)
OMPI_RANK = _setting("OMPI_COMM_WORLD_RANK", None, "Open MPI mpiexec: global rank.")
OMPI_SIZE = _setting("OMPI_COMM_WORLD_SIZE", None, "Open MPI mpiexec: world size.")
OMPI_LOCAL_RANK = _setting("OMPI_COMM_WORLD_LOCAL_RANK", None, "Open MPI: rank on this node.")
OMPI_LOCAL_SIZE = _setting("OMPI_COMM_WORLD_LOCAL_SIZE", None, "Open MPI: ranks on this node.")
PMI_RANK = _setting("PMI_RANK", None, "MPICH / Intel MPI (Hydra) mpiexec: global rank.")
PMI_SIZE = _setting("PMI_SIZE", None, "MPICH / Intel MPI (Hydra) mpiexec: world size.")
MPI_LOCAL_RANK = _setting("MPI_LOCALRANKID", None, "MPICH / Intel MPI: rank on this node.")
MPI_LOCAL_SIZE = _setting("MPI_LOCALNRANKS", None, "MPICH / Intel MPI: ranks on this node.")
MV2_RANK = _setting("MV2_COMM_WORLD_RANK", None, "MVAPICH mpirun_rsh: global rank.")
MV2_SIZE = _setting("MV2_COMM_WORLD_SIZE", None, "MVAPICH mpirun_rsh: world size.")
MV2_LOCAL_RANK = _setting("MV2_COMM_WORLD_LOCAL_RANK", None, "MVAPICH: rank on this node.")
MV2_LOCAL_SIZE = _setting("MV2_COMM_WORLD_LOCAL_SIZE", None, "MVAPICH: ranks on this node.")
