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


def _run(backend: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accord.run", "--nproc-per-node", "2", _EXAMPLE,
                           "--backend", backend, "--steps", "3"],
                          capture_output=True, text=True, timeout=240)


def _losses(backend: str) -> dict[tuple[int, int], str]:
    done = _run(backend)
    if (backend == "gloo" and done.returncode != 0 and "terminate called without an active exception"
            in done.stdout + done.stderr):
        # torch's gloo (the reference, not accord) now and then aborts in its teardown after
        # the last step (seen once in CI, 2026-11-25): run the reference again
        done = _run(backend)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = re.findall(r"rank (\d)/2 step (\d) loss ([\d.]+) \((\w+)\)", done.stdout + done.stderr)
    assert {b for *_, b in found} == {backend}, found
    return {(int(r), int(s)): loss for r, s, loss, _ in found}


def test_the_ddp_example_trains_as_on_gloo() -> None:
    accord, gloo = _losses("accord"), _losses("gloo")
    assert len(accord) == 6 and accord == gloo
