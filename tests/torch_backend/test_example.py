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


#: what torch's gloo prints when it aborts in its teardown, after the last step
_GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def _losses(backend: str) -> dict[tuple[int, int], str]:
    done = _run(backend)
    output = done.stdout + done.stderr
    found = re.findall(r"rank (\d)/2 step (\d) loss ([\d.]+) \((\w+)\)", output)
    losses = {(int(r), int(s)): loss for r, s, loss, _ in found}
    # torch's gloo (the reference, not accord) now and then aborts in its teardown, after
    # every step printed its loss (CI 2026-11-25, and twice in a row 2026-11-27): its losses
    # are what the test needs. accord's run must exit cleanly.
    gloo_teardown = backend == "gloo" and _GLOO_TEARDOWN_ABORT in output and len(losses) == 6
    assert done.returncode == 0 or gloo_teardown, done.stdout[-2000:] + done.stderr[-2000:]
    assert {b for *_, b in found} == {backend}, found
    return losses


def test_the_ddp_example_trains_as_on_gloo() -> None:
    accord, gloo = _losses("accord"), _losses("gloo")
    assert len(accord) == 6 and accord == gloo
