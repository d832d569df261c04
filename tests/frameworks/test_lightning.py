"""PyTorch Lightning on backend accord: Trainer.fit with
DDPStrategy(process_group_backend="accord") in processes a launcher started (torchrun's
environment) gives gloo's losses and parameters."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from .compare import assert_same, need, on_both  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.frameworks, pytest.mark.timeout(300)]


def test_ddp_strategy_fits_as_on_gloo() -> None:
    need("lightning", "PyTorch Lightning")
    gloo, accord = on_both("lightning_fit", self_init=True)  # Lightning makes the group
    assert [r["backend"] for r in gloo + accord] == ["gloo", "gloo", "accord", "accord"]
    assert len(gloo[0]["losses"]) == 4
    assert_same(gloo, accord, ignore=("backend",))
