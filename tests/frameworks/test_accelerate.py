"""Hugging Face accelerate on backend accord. accelerate refuses any backend name but gloo or
mpi on CPU; the recipe makes the group first (init_process_group("accord")), then
Accelerator(cpu=True) uses it: gloo's losses (gathered from both ranks) and parameters.
The test also pins what the guide warns of: the refusal's text, Accelerator() without
cpu=True leaving each rank alone on a machine without GPUs, accelerate's state saying "gloo"
though the group is accord's."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from .compare import assert_same, need, on_both  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.frameworks, pytest.mark.timeout(300)]


def test_the_group_first_then_accelerator_trains_as_on_gloo() -> None:
    need("accelerate", "Hugging Face accelerate")
    gloo, accord = on_both("accelerate_train", self_init=True)
    for rank in accord:
        assert rank["refusal"] == "Your assigned backend accord is not available, please use gloo"
        assert rank["without_cpu"] == 1
        assert rank["backend"] == "accord" and rank["state_backend"] == "gloo" and rank["processes"] == 2
    assert gloo[0]["backend"] == "gloo" and gloo[0]["processes"] == 2
    assert gloo[0]["losses"] == gloo[1]["losses"] and len(gloo[0]["losses"]) == 4  # (gathered)
    assert_same(gloo, accord, ignore=("refusal", "without_cpu", "backend"))
