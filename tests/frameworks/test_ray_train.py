"""Ray Train on backend accord: TorchTrainer with TorchConfig(backend="accord") trains DDP as
on gloo. Ray sets MASTER_ADDR to the node's network address, so each accord worker warns that
it listens beyond loopback with no secret, and the warning says what to do; done as it says
(ACCORD_SOCKET_IFNAME=lo through ray.init's runtime_env), the job runs without it and gives the
same results."""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any

import pytest

pytest.importorskip("torch")

from .compare import assert_same, need  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.frameworks, pytest.mark.timeout(600)]

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADVICE = 'ray.init(runtime_env={"env_vars": {"ACCORD_SOCKET_IFNAME": "lo"}})'


def _fit(backend: str, tmp_path: Any, label: str) -> list[dict[str, Any]]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from . import programs

    out = tmp_path / label
    out.mkdir()
    TorchTrainer(
        programs.ray_train_loop,
        train_loop_config={"out": str(out)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        torch_config=TorchConfig(backend=backend, timeout_s=120),
        run_config=RunConfig(storage_path=str(tmp_path / "ray-results"), name=label),
    ).fit()
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _warnings(context: Any) -> list[str]:
    """The InsecureListenWarning lines in the session's worker logs (stderr of each worker)."""
    found = []
    for path in glob.glob(os.path.join(context.address_info["session_dir"], "logs", "worker-*.err")):
        with open(path, errors="replace") as f:
            found += [line for line in f if "InsecureListenWarning" in line]
    return found


def _shutdown(ray: Any, context: Any) -> None:
    """Stop the Ray session and remove its directory (logs, sockets) from Ray's temp dir."""
    ray.shutdown()
    shutil.rmtree(context.address_info["session_dir"], ignore_errors=True)


def test_torch_trainer_on_accord_trains_as_on_gloo_and_the_warning_says_what_to_do(
    tmp_path, monkeypatch
) -> None:
    need("ray.train", "Ray Train")
    import ray

    # The workers import this test's programs (and accord) as the test process does.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([_TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    monkeypatch.delenv("ACCORD_SOCKET_IFNAME", raising=False)
    common = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}
    context = ray.init(**common)
    try:
        gloo = _fit("gloo", tmp_path, "gloo")
        accord = _fit("accord", tmp_path, "accord")
        warned = _warnings(context)
    finally:
        _shutdown(ray, context)
    assert [r["backend"] for r in gloo + accord] == ["gloo", "gloo", "accord", "accord"]
    address = accord[0]["master_addr"]
    assert address not in ("127.0.0.1", "localhost", None), address  # Ray's node address
    assert_same(gloo, accord, ignore=("backend", "warned"))
    assert [r["warned"] for r in accord] == [True, True]
    assert len(warned) == 2, warned  # one per worker, naming the fix
    for line in warned:
        assert f"listens on {address}" in line and "all 2 ranks run on this host" in line, line
        assert ADVICE in line and "ACCORD_SECRET" in line, line

    context = ray.init(**common, runtime_env={"env_vars": {"ACCORD_SOCKET_IFNAME": "lo"}})  # (ADVICE)
    try:
        advised = _fit("accord", tmp_path, "advised")
        warned = _warnings(context)
    finally:
        _shutdown(ray, context)
    assert [r["warned"] for r in advised] == [False, False] and warned == []
    assert_same(gloo, advised, ignore=("backend", "warned"))
