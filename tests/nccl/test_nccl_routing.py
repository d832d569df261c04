"""``"cpu:accord,cuda:nccl"``: CUDA tensors go to torch's ProcessGroupNCCL, one per accord group,
made on accord's store; everything else stays on accord's backend.

Our machines have no GPU. The jobs here run with ``ACCORD_NCCL_STANDIN=gloo``: torch's
ProcessGroupGloo stands in for NCCL and carries CPU torch tensors, NumPy arrays stay on accord,
so the routing (device → backend, one device group per group, the store handed over, the
calls translated) runs as it would with CUDA. ``test_cuda_*`` runs the same scenarios on CUDA
tensors and real NCCL where two GPUs exist; ``test_one_cuda_*`` runs a world of one rank on
one GPU with real NCCL (NCCL refuses two ranks on one device). Both skip, saying so, elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the NCCL route hands tensors to torch: pip install torch")

import accord  # noqa: E402
from accord.backend_names import device_backends, resolve_backend  # noqa: E402
from nccl.scenarios import STANDIN_LACKS_ALLTOALL  # noqa: E402

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_VERSION = tuple(int(p) for p in torch.__version__.split(".")[:2])
HAS_CUDA = torch.cuda.is_available() and torch.cuda.device_count() >= 2 and accord.is_nccl_available()
HAS_ONE_CUDA = torch.cuda.is_available() and torch.cuda.device_count() >= 1 and accord.is_nccl_available()
NO_CUDA = ("no CUDA device with NCCL here: the NCCL route was tested with torch's gloo standing in "
           "for NCCL on CPU tensors")


def run(scenario: str, n: int, **env: str) -> dict[int, Any]:
    """Run one scenario on ``n`` ranks under accordrun; {rank: what it saw}."""
    with tempfile.TemporaryDirectory() as out:
        # absolute: the job runs in tests/, where a relative entry ("src") would miss
        paths = [TESTS] + [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        environ = dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
                       OMP_NUM_THREADS="1", ACCORD_TEST_OUT=out, TORCH_CPP_LOG_LEVEL="ERROR", **env)
        done = subprocess.run([sys.executable, "-m", "accord.run", "--nproc-per-node", str(n), "-m",
                               "nccl.scenarios", scenario], env=environ, cwd=TESTS, capture_output=True,
                              text=True, timeout=120)
        results = {}
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                results[int(name[4:-5])] = json.load(f)
    assert done.returncode == 0 and len(results) == n, (done.stdout[-3000:], done.stderr[-3000:])
    return results


def standin(scenario: str, n: int) -> dict[int, Any]:
    return run(scenario, n, ACCORD_NCCL_STANDIN="gloo")


def check_collectives(results: dict[int, Any], n: int, standin: bool = True) -> None:
    total = n * (n + 1) / 2
    for rank, got in results.items():
        assert got["config"] == "cpu:accord,cuda:nccl"
        assert got["all_reduce"] == [total] * 3
        assert got["all_reduce_max"] == [n - 1] * 2
        assert got["numpy"] == [total] * 2
        assert got["broadcast"] == [n - 1] * 2
        assert got["reduce_root"] == ([total] * 2 if rank == 0 else None)
        assert got["all_gather"] == [[r, r] for r in range(n)]
        assert got["all_gather_into_tensor"] == [10 * r for r in range(n) for _ in range(2)]
        assert got["gather"] == ([[r] for r in range(n)] if rank == 0 else None)
        assert got["scatter"] == [5 * rank]
        assert got["reduce_scatter"] == [sum(r + rank for r in range(n))] * 2
        assert got["reduce_scatter_tensor"] == [sum(r + rank for r in range(n))]
        if got["all_to_all"] == STANDIN_LACKS_ALLTOALL:  # only torch < 2.13's gloo, standing in
            assert standin and TORCH_VERSION < (2, 13), got["all_to_all"]
        else:
            assert got["all_to_all"] == [[100 * r + rank] for r in range(n)]
            assert got["all_to_all_single"] == [100 * r + rank for r in range(n)]
        assert got["work_wait"] is True
        # accord's own backend saw only the NumPy all_reduce and the barrier
        assert got["accord_ops"] == {"all_reduce": 1, "barrier": 1}


@pytest.fixture(scope="module")
def three_ranks() -> dict[int, Any]:
    """collectives, p2p and bad_input, run once on 3 ranks with the stand-in."""
    return standin("everything", 3)


def part(results: dict[int, Any], name: str) -> dict[int, Any]:
    return {rank: got[name] for rank, got in results.items()}


@pytest.mark.multiprocess
def test_collectives_go_to_the_device_group(three_ranks: dict[int, Any]) -> None:
    n = 3
    results = part(three_ranks, "collectives")
    check_collectives(results, n)
    # the async Work is torch's own, as torch returns for NCCL
    assert results[0]["work_type"] == "torch.distributed.distributed_c10d.Work"


@pytest.mark.multiprocess
def test_subgroups_get_their_own_device_group() -> None:
    n = 3
    results = standin("groups", n)
    for rank, got in results.items():
        if rank < n - 1:
            assert got["head"] == {"sum": [3.0], "config": "cpu:accord,cuda:nccl"}
        else:
            assert got["head"] is None
        assert got["subgroup"] == {"sum": [rank + 1.0], "ranks": [rank]}
        assert got["split"] == [rank + 1.0]
        assert got["cpu_only_config"] == "cpu:gloo"


@pytest.mark.multiprocess
def test_point_to_point_on_the_device_group(three_ranks: dict[int, Any]) -> None:
    n = 3
    for rank, got in part(three_ranks, "p2p").items():
        left = (rank - 1) % n
        assert got["recv"] == [left] * 2 and got["recv_from"] == left
        assert got["irecv"] == [10 + left]
        assert got["batch"] == [left] * 3
        if rank == 0:
            assert got["any_source"] == list(range(1, n))


@pytest.mark.multiprocess
def test_bad_input_on_the_device_group(three_ranks: dict[int, Any]) -> None:
    for got in part(three_ranks, "bad_input").values():
        assert got["gather_list_off_root"][0] == "ArgumentError"
        assert "non-destination" in got["gather_list_off_root"][1]
        assert got["mixed_batch"][0] == "ArgumentError" and "different devices" in got["mixed_batch"][1]
        assert got["complex_max"][0] == "ArgumentError"
        assert got["after"] == [3.0]


@pytest.mark.multiprocess
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA devices with NCCL here (needs 2 GPUs): the NCCL "
                    "route was tested with torch's gloo standing in for NCCL on CPU tensors")
@pytest.mark.parametrize("scenario", ["collectives", "p2p", "groups"])
def test_cuda_tensors_through_nccl(scenario: str) -> None:
    results = run(scenario, 2, ACCORD_TEST_DEVICE="cuda")
    if scenario == "collectives":
        check_collectives(results, 2, standin=False)


@pytest.mark.multiprocess
@pytest.mark.skipif(not HAS_ONE_CUDA, reason=NO_CUDA)
def test_one_cuda_rank_through_nccl_under_accordrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """A world of one rank on one GPU, launched by accordrun: every collective and the
    subgroups on CUDA tensors through real NCCL (no stand-in). p2p needs a peer: not at n=1."""
    monkeypatch.delenv("ACCORD_NCCL_STANDIN", raising=False)
    collectives = run("collectives", 1, ACCORD_TEST_DEVICE="cuda")
    groups = run("groups", 1, ACCORD_TEST_DEVICE="cuda")
    check_collectives(collectives, 1, standin=False)
    assert groups[0] == {"head": {"sum": [1.0], "config": "cpu:accord,cuda:nccl"},
                         "subgroup": {"sum": [1.0], "ranks": [0]}, "split": [1.0],
                         "cpu_only_config": "cpu:gloo"}


# -- in one process -------------------------------------------------------------------------


@pytest.mark.parametrize("spec, cpu, devices", [
    ("cpu:accord,cuda:nccl", "accord", {"cuda": "nccl"}),
    ("cpu:gloo,cuda:nccl", "gloo", {"cuda": "nccl"}),
    ("nccl", "accord", {"cuda": "nccl"}),
    ("cuda:nccl", "accord", {"cuda": "nccl"}),
    ("NCCL", "accord", {"cuda": "nccl"}),
    ("gloo", "gloo", {}),
    (None, "accord", {}),
])
def test_backend_strings(spec: str | None, cpu: str, devices: dict[str, str]) -> None:
    assert resolve_backend(spec) == cpu
    assert device_backends(spec) == devices


@pytest.mark.parametrize("spec, words", [
    ("cpu:accord,cuda:gloo", "cuda:nccl"),
    ("cpu:accord,xpu:nccl", "cuda:nccl"),
    ("cpu:accord,cuda", "device:backend"),
    ("ucc", "not available"),
])
def test_bad_backend_strings(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        resolve_backend(spec)
        device_backends(spec)


@pytest.mark.skipif(accord.is_nccl_available(), reason="this torch has NCCL")
def test_nccl_without_a_cuda_torch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCORD_NCCL_STANDIN", raising=False)
    with pytest.raises(ValueError, match="CUDA build of torch"):
        accord.init_process_group("cpu:accord,cuda:nccl", store=accord.HashStore(), rank=0, world_size=1)
    assert not accord.is_initialized()  # the half-made world was taken down
    accord.init_process_group("gloo", store=accord.HashStore(), rank=0, world_size=1)
    accord.destroy_process_group()


@pytest.mark.skipif(not HAS_ONE_CUDA, reason=NO_CUDA)
def test_one_cuda_rank_world_through_real_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    """World 1 in this process on CUDA tensors with real NCCL: results on the GPU, a device
    group per group (none for an explicit CPU backend), and accord's own backend saw only
    the NumPy call."""
    monkeypatch.delenv("ACCORD_NCCL_STANDIN", raising=False)
    cuda = torch.device("cuda", 0)
    accord.init_process_group("nccl", store=accord.HashStore(), rank=0, world_size=1)
    try:
        group = accord.new_group([0])
        assert accord.get_backend_config() == "cpu:accord,cuda:nccl"
        assert set(accord.group.WORLD.device_groups) == set(group.device_groups) == {"cuda"}
        assert "nccl" in repr(group.device_groups["cuda"])
        assert "cuda" not in accord.new_group([0], backend="gloo").device_groups
        t = torch.arange(4.0, device=cuda)
        accord.all_reduce(t, op=accord.ReduceOp.SUM)
        assert t.device == cuda and t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        a = np.arange(4.0)
        accord.all_reduce(a)  # NumPy: accord's own backend
        assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
        c = torch.tensor([1 + 2j, 3 - 1j], device=cuda)
        accord.all_reduce(c, group=group)  # complex: handed to NCCL as its real view
        assert c.cpu().tolist() == [1 + 2j, 3 - 1j]
        out = [torch.zeros(2, device=cuda)]
        accord.all_gather(out, torch.full((2,), 7.0, device=cuda), group=group)
        into = torch.zeros(3, device=cuda)
        accord.all_gather_into_tensor(into, torch.arange(3.0, device=cuda))
        rst = torch.zeros(2, device=cuda)
        accord.reduce_scatter_tensor(rst, torch.full((2,), 5.0, device=cuda))
        single = torch.zeros(3, device=cuda)
        accord.all_to_all_single(single, torch.arange(3.0, device=cuda) + 100)
        b = torch.full((2,), 9.0, device=cuda)
        work = accord.broadcast(b, src=0, async_op=True)
        assert work.wait() is True
        prem = torch.full((2,), 3.0, device=cuda)
        accord.all_reduce(prem, op=accord._make_nccl_premul_sum(2.0))
        torch.cuda.synchronize()
        assert out[0].tolist() == [7.0, 7.0] and into.tolist() == [0.0, 1.0, 2.0]
        assert rst.tolist() == [5.0, 5.0] and single.tolist() == [100.0, 101.0, 102.0]
        assert b.tolist() == [9.0, 9.0] and prem.tolist() == [6.0, 6.0]
        accord.barrier()
        assert {op: s["calls"] for op, s in accord.comm_stats()["0"].items()} == \
            {"all_reduce": 1, "barrier": 1}  # the NumPy all_reduce and the barrier, nothing else
        device_group = group.device_groups["cuda"]
    finally:
        accord.destroy_process_group()
    with pytest.raises(RuntimeError, match="shut down"):
        device_group.broadcast(torch.ones(2, device=cuda), 0, False)


def test_a_blocking_call_whose_backend_returns_no_work() -> None:
    """torch's NCCL returns None, not a Work, for many blocking calls (it synchronized the
    stream in C++; torch's front end then skips the wait): accord's route must too. Seen on
    an H200 with torch 2.11: every blocking bfloat16/float64 all_reduce raised AttributeError."""
    from accord.devices.nccl.device_group import DeviceGroup

    class NoWork:
        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: None  # allreduce, broadcast, ... all return None

    group = DeviceGroup(NoWork(), None, "cpu", "nccl")  # type: ignore[arg-type]
    t = torch.ones(2)
    assert group.all_reduce(t, accord.ReduceOp.SUM, False) is None
    assert group.broadcast(t, 0, False) is None
    assert group.all_gather([t], t, False) is None
    assert group.all_to_all_single(t, t, None, None, False) is None
    assert group.all_reduce(t, accord.ReduceOp.SUM, True) is None  # async: torch's None as it is


def test_one_rank_world_with_the_standin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_NCCL_STANDIN", "gloo")
    threads_before = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
    accord.init_process_group("nccl", store=accord.HashStore(), rank=0, world_size=1)
    try:
        t = torch.arange(4.0)
        accord.all_reduce(t, op=accord.ReduceOp.SUM)
        a = np.arange(4.0)
        accord.all_reduce(a)
        assert t.tolist() == a.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert accord.get_backend_config() == "cpu:accord,cuda:nccl"
        group = accord.new_group([0])
        assert set(group.device_groups) == {"cuda"}
        assert "cuda" not in accord.new_group([0], backend="gloo").device_groups
        assert accord.comm_stats()["0"]["all_reduce"]["calls"] == 1  # the NumPy one
        device_group = group.device_groups["cuda"]
        work = device_group.broadcast(torch.ones(2), 0, True)
        work.wait()
        del work
    finally:
        accord.destroy_process_group()
    # The torch backends went with the groups (their worker threads joined then, not at
    # interpreter exit, where a worker dropping a tensor aborts the process), and say so.
    with pytest.raises(RuntimeError, match="shut down"):
        device_group.broadcast(torch.ones(2), 0, False)
    if os.path.isdir("/proc/self/task"):
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
        assert len(names) <= threads_before, names


def check_multigpu(results: dict[int, Any], n: int) -> None:
    devices, total = 2, sum(range(1, 2 * n + 1))  # every device's value: rank × 2 + j + 1
    for rank, got in results.items():
        assert got["all_reduce"] == [[total] * 2] * devices
        assert got["broadcast"] == [[10 * (n - 1) + 1]] * devices
        assert got["reduce"] == ([[1], [total]] if rank == 0 else [[rank * 2 + 1], [rank * 2 + 2]])
        assert got["all_gather"] == [list(range(n * devices))] * devices
        # device x of the world gets the sum over ranks and i of (x + i)
        assert got["reduce_scatter"] == [n * (2 * (rank * devices + j) + 1) for j in range(devices)]
        assert got["numpy"] == [[total] * 2] * devices
        # the device lists went to the device group; accord's backend saw the NumPy list's
        # all_reduce, and the list-length agreement (a MAX of two integers) of the four calls
        # whose message size does not carry the length (all_reduce twice, broadcast, reduce)
        assert got["accord_ops"] == {"all_reduce": 1 + 4}


@pytest.mark.multiprocess
def test_multigpu_lists_of_device_tensors_go_to_the_device_group() -> None:
    check_multigpu(standin("multigpu", 2), 2)


@pytest.mark.multiprocess
@pytest.mark.skipif(not HAS_ONE_CUDA, reason=NO_CUDA)
def test_one_cuda_multigpu() -> None:
    """One rank, real NCCL: the list's tensors on the one GPU (torch's NCCL takes one device
    per process; each list element still counts as a device of its own)."""
    check_multigpu(run("multigpu", 1, ACCORD_TEST_DEVICE="cuda"), 1)
