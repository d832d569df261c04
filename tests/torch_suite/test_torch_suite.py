"""torch's own distributed suite (distributed_test.py from the wheel) on backend "accord".

The default run takes a slice (collectives, p2p, object collectives, subgroups, DDP) at world
size 2; ``pytest --long`` runs the whole suite (about 20 minutes here) and requires that no
test fails. The suite needs torch's test dependency ``expecttest`` (in the ``test`` extra):
without it, or without torch, these tests skip.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

_RUNNER = os.path.join(os.path.dirname(__file__), "run_suite.py")

#: A representative slice: a collective, any-source p2p with the profiler, DDP on CPU, and a
#: subgroup's destruction (about 7 s each: every test spawns its ranks). Broadcast and the
#: coalesced forms, in it before, are compared with gloo on every run elsewhere
#: (tests/differential, tests/torch_backend/test_training.py::test_coalesced_forms).
SLICE = ["test_all_reduce_full_group_sum", "test_send_recv_any_source_torch_profiler",
         "test_DistributedDataParallelCPU", "test_destroy_group"]


def _run(backend: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, _RUNNER, backend, "-o", "timeout=300", "-rfE", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(4200)
def test_torch_distributed_suite_on_accord(long_run: bool) -> None:
    args = [] if long_run else ["--tests", ",".join(SLICE)]
    done = _run("accord", *args, timeout=4000 if long_run else 600)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    assert " passed" in summary and "failed" not in summary, summary
    if not long_run:
        assert f"{len(SLICE)} passed" in summary, summary  # none of the slice may skip


#: Tests the suite runs only when the backend is named "gloo", run on accord (BACKEND
#: accord-as-gloo): those that cannot pass there, and why (none of them is accord's doing).
GLOO_GATED = ["test_all_gather_object_default_pg", "test_all_gather_object_subgroup",
              "test_all_reduce_coalesced_full_group_max", "test_all_reduce_coalesced_full_group_min",
              "test_all_reduce_coalesced_full_group_product",
              "test_all_reduce_coalesced_full_group_sum", "test_all_reduce_coalesced_max",
              "test_all_reduce_coalesced_min", "test_all_reduce_coalesced_product",
              "test_all_reduce_coalesced_sum", "test_barrier_timeout_full_group",
              "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags", "test_get_future",
              "test_grads_same_across_ranks_with_no_sync", "test_scatter_object_list",
              "test_sparse_all_reduce_sum"]
NOT_APPLICABLE = {
    "test_accumulate_gradients_no_sync": "the test builds its model only when BACKEND is named "
                                         "mpi, gloo or nccl",
    "test_monitored_barrier_gloo": "torch's dist.monitored_barrier refuses every backend but gloo",
    "test_monitored_barrier_gloo_subgroup": "the same",
    "test_monitored_barrier_gloo_rank_0_timeout": "asserts gloo's wording of the error",
}


@pytest.mark.timeout(1200)
def test_the_suites_gloo_only_tests_pass_on_accord(long_run: bool) -> None:
    if not long_run:
        pytest.skip("a long test (about 3 minutes): pytest --long")
    done = _run("accord-as-gloo", "--tests", ",".join(GLOO_GATED), timeout=1100)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}"
    assert f"{len(GLOO_GATED)} passed" in summary, summary
