"""env:// under cluster launchers (SLURM, mpiexec) and under accordrun's agent store, in process."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

import accord as dist
from accord.rendezvous import cluster, rendezvous
from accord.rendezvous.handlers import AgentAttemptStore
from accord.store import TCPStore

CONTRACT = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
            "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")
CLUSTER = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID", "SLURM_NODEID",
           "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
           "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID",
           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
           "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
           "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE")


@pytest.fixture
def env(monkeypatch):
    """A clean slate: no contract, no cluster variables; ``env(NAME=value, …)`` sets some."""
    for name in CONTRACT + CLUSTER:
        monkeypatch.delenv(name, raising=False)

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
    return set_env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("hostlist, hosts", [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("a1,b[8-10]-ib,c", ["a1", "b8-ib", "b9-ib", "b10-ib", "c"]),
    ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
    ("login", ["login"]),
])
def test_hostlist_expansion(hostlist, hosts):
    assert cluster.expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["n[1-", "n[3-1]", "n[a-b]", "n[[1]]"])
def test_malformed_hostlists_are_named(bad):
    with pytest.raises(ValueError, match="hostlist"):
        cluster.expand_hostlist(bad)


def test_tasks_per_node():
    assert cluster.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="tasks-per-node"):
        cluster.expand_tasks_per_node("2(3)")


def test_slurm(env):
    env(SLURM_PROCID="5", SLURM_NTASKS="7", SLURM_LOCALID="1", SLURM_NODEID="2",
        SLURM_STEP_TASKS_PER_NODE="3(x2),1", SLURM_JOB_NODELIST="gpu[08-09],cpu1",
        SLURM_JOB_ID="1234567")
    found = cluster.detect()
    assert found == cluster.ClusterEnv("SLURM", 5, 7, 1, 1, "gpu08", 19567)
    env(SLURM_NTASKS_PER_NODE="4")
    assert cluster.detect().local_world_size == 4


@pytest.mark.parametrize("values, expected", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, ("Open MPI", 3, 8, 1, 2)),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"},
     ("MPICH/Intel MPI", 2, 4, 0, 1)),
    ({"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"}, ("MVAPICH", 1, 2, None, None)),
])
def test_mpiexec(env, values, expected):
    env(**values, SLURM_PROCID="0", SLURM_NTASKS="1")  # mpiexec inside a SLURM batch script
    found = cluster.detect()
    assert (found.source, found.rank, found.world_size, found.local_rank,
            found.local_world_size) == expected


def test_init_process_group_from_slurm_variables(env):
    env(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_JOB_NODELIST="127.0.0.[1-3]",
        MASTER_PORT=str(_free_port()))
    dist.init_process_group(timeout=timedelta(seconds=10))
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
    finally:
        dist.destroy_process_group()


def test_missing_rank_names_every_variable_looked_at(env):
    env(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    with pytest.raises(ValueError) as caught:
        next(rendezvous("env://"))
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"):
        assert name in str(caught.value)


def test_missing_master_addr_names_the_nodelists(env):
    env(RANK="0", WORLD_SIZE="1", MASTER_PORT="1")
    with pytest.raises(ValueError, match="MASTER_ADDR.*SLURM_JOB_NODELIST"):
        next(rendezvous("env://"))


def test_agent_store_every_rank_is_a_client_under_the_attempt_prefix(env):
    agent = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=10))
    try:
        env(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(agent.port),
            TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="2")
        store, rank, size = next(rendezvous("env://"))
        assert isinstance(store, AgentAttemptStore) and (rank, size) == (0, 2)
        store.set("key", "value")
        assert agent.get("/worker/attempt_2/key") == b"value"
        store.close()  # the worker's connection, not the agent's server
        assert agent.get("/worker/attempt_2/key") == b"value"
    finally:
        agent.close()


def test_init_process_group_counts_generations_per_attempt(env):
    agent = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=10))
    try:
        agent.set("/worker/attempt_0/accord/init_count", "3")  # a failed attempt's leftovers
        env(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(agent.port),
            TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="1")
        dist.init_process_group(timeout=timedelta(seconds=10))
        dist.destroy_process_group()
        assert agent.get("/worker/attempt_1/accord/init_count") == b"1"
    finally:
        agent.close()
