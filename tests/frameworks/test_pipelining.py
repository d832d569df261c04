"""torch.distributed.pipelining on backend accord: a GPipe schedule over 2 stages trains as it
does on gloo (the stages exchange activations and gradients with send/recv). Needs only torch:
CI runs it by default, as the representative of the framework recipes."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from .compare import assert_same, on_both  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(120)]


def test_gpipe_trains_as_on_gloo() -> None:
    gloo, accord = on_both("pipeline_gpipe", timeout=100)
    assert gloo[0]["losses"] == [] and len(gloo[1]["losses"]) == 3  # the last stage has them
    assert_same(gloo, accord)
