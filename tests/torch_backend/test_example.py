"""examples/ddp_train.py: the same losses on backend accord as on gloo, under accordrun."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(300)]

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ddp_train.py")


def _losses(backend: str) -> dict[tuple[int, int], str]:
    done = subprocess.run([sys.executable, "-m", "accord.run", "--nproc-per-node", "2", _EXAMPLE,
                           "--backend", backend, "--steps", "3"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = re.findall(r"rank (\d)/2 step (\d) loss ([\d.]+) \((\w+)\)", done.stdout + done.stderr)
    assert {b for *_, b in found} == {backend}, found
    return {(int(r), int(s)): loss for r, s, loss, _ in found}


def test_the_ddp_example_trains_as_on_gloo() -> None:
    accord, gloo = _losses("accord"), _losses("gloo")
    assert len(accord) == 6 and accord == gloo
