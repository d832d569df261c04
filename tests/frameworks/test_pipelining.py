"""torch.distributed.pipelining on backend accord: a GPipe schedule over 2 stages trains as it
does on gloo (the stages exchange activations and gradients with send/recv). Needs only torch:
CI runs it by default, as the representative of the framework recipes. The program runs in
the world-2 jobs the torch backend's tests share (torch_backend/shared_jobs.py: starting
processes that import torch is most of a job's time)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from torch_backend import shared_jobs  # noqa: E402

from .compare import assert_same  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(600)]


def test_gpipe_trains_as_on_gloo() -> None:
    gloo, accord = ([r["gpipe"] for r in shared_jobs.results(backend, 2)] for backend in ("gloo", "accord"))
    assert gloo[0]["losses"] == [] and len(gloo[1]["losses"]) == 3  # the last stage has them
    assert_same(gloo, accord)
