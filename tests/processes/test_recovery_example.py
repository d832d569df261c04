"""examples/recovery.py: a job that loses ranks to ``kill -9`` (any of them: the store is
hosted by the driver) goes on with replacements, and every rank ends with the same
parameters (the example checks it on every rank and fails otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "recovery.py")


def test_the_recovery_example_survives_two_kills() -> None:
    done = subprocess.run([sys.executable, _EXAMPLE, "--kills", "2", "--steps", "1200"],
                          capture_output=True, text=True, timeout=100)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert out.count("driver: kill -9") == 2, out[-3000:]
    assert out.count(": same parameters") == 4 and "DIFFERENT" not in out, out[-3000:]
    assert "driver: every rank ended with the same parameters" in out, out[-3000:]
