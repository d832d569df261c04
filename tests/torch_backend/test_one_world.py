"""One world for both APIs: after ``import accord as dist; dist.init_process_group(...)``
torch's own code (DDP, DeviceMesh, torch.distributed.*) finds accord's world as torch's
default group (docs/guides/torch-default-group.md).

The documents' DDP example with the import swapped gives the same gradients and parameters
as the same program on torch + gloo; torch's functions, torch's and accord's subgroups and a
DeviceMesh run on it; destroying through either API ends both, and init works again;
``ACCORD_TORCH_DEFAULT_GROUP=0`` leaves torch's ValueError as it was; a world torch already
has is left alone with a warning that says what to write; torch imported after accord's
init still finds the world; a NumPy-only program never imports torch.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from . import harness  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(300)]

SCRIPT = pathlib.Path(__file__).with_name("one_world_script.py")


def test_the_documents_ddp_example_with_the_import_swapped_trains_as_on_torch() -> None:
    theirs = harness.run("one_world:seed_ddp_example", "gloo", 2, self_init=True, api="torch")
    ours = harness.run("one_world:seed_ddp_example", "gloo", 2, self_init=True, api="accord")
    for rank in range(2):
        assert ours[rank]["grads"] == theirs[rank]["grads"], rank  # world 2: sums are exact
        assert ours[rank]["params"] == theirs[rank]["params"], rank
        assert ours[rank]["torch_backend"] == "accord" and theirs[rank]["torch_backend"] == "gloo"
        assert ours[rank]["after_destroy"] == [False, False]
    assert ours[0]["params"] == ours[1]["params"]  # DDP broadcast rank 0's model
    assert ours[0]["grads"] == ours[1]["grads"]  # and averaged the gradients


def test_torch_functions_subgroups_and_device_mesh_run_on_accords_world() -> None:
    got = harness.run("one_world:torch_calls", "gloo", 2, self_init=True)
    for rank, r in enumerate(got):
        assert r["rank"] == [rank, rank] and r["size"] == [2, 2]
        assert r["backend"] == "accord" and r["world_is_accords"]
        assert r["all_reduce"] == [3.0] * 4
        assert r["all_gather"] == [[0, 0], [1, 10]]
        assert r["torch_subgroup"] == [3.0]
        assert r["accord_subgroup"] == [3.0]
        assert r["funcol_on_mesh"] == [3.0]
        assert r["mesh_group"] == [2.0]


def test_destroy_through_either_api_ends_both_and_init_works_again(tmp_path: pathlib.Path) -> None:
    got = harness.run("one_world:destroy_and_reinit", "gloo", 2, self_init=True, folder=str(tmp_path))
    for r in got:
        assert r["seen"] == [1.0, [False, False], 3.0, [False, False], 5.0, [False, False]]


def test_switched_off_torch_raises_its_own_error() -> None:
    got = harness.run("one_world:switched_off", "gloo", 2, self_init=True,
                      env={"ACCORD_TORCH_DEFAULT_GROUP": "0"})
    for r in got:
        assert r["error"] is not None and "Default process group has not been initialized" in r["error"]
        assert r["torch_initialized"] is False and r["accord_sum"] == 2.0


def test_torch_default_group_made_first_is_left_alone_with_a_warning() -> None:
    (r,) = harness.run("one_world:torch_initialized_first", "gloo", 1, self_init=True)
    assert r["torch_backend"] == "gloo" and r["torch_still_initialized"] is True
    assert len(r["warnings"]) == 1
    assert "initialized already" in r["warnings"][0]
    assert "torch.distributed.init_process_group('accord')" in r["warnings"][0]


def _job(mode: str, world_size: int = 2) -> list[dict]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(harness.free_port()),
           "WORLD_SIZE": str(world_size), "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), mode], env={**env, "RANK": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(world_size)]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
    return results


def test_a_numpy_only_program_never_imports_torch() -> None:
    for r in _job("numpy"):
        assert r["sum"] == [3.0]
        assert r["torch_after_init"] is False and r["torch_at_end"] is False


def test_torch_imported_after_accords_init_still_finds_the_world() -> None:
    got = _job("late")
    for r in got:
        assert r["torch_after_init"] is False and r["torch_backend"] == "accord"
    assert got[0]["weight"] == got[1]["weight"]  # DDP broadcast rank 0's parameters
    assert got[0]["grad"] == got[1]["grad"]  # and averaged the gradients
    # rank 0's input is 1s, rank 1's 2s: the mean gradient of sum(w·x + b) is 1.5 per weight
    assert got[0]["grad"] == [1.5 * 2] * 3
