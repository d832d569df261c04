"""examples/recovery.py: run as ``python examples/recovery.py``, it starts its job under
``accordrun --replace-workers`` and kills workers with ``kill -9`` (any of them: the store is
accordrun's); accordrun starts replacements, the others go on without restarting, and every
rank ends with the same parameters (the example checks it on every rank and fails otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(150)]

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "recovery.py")
_LAUNCHERS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "ACCORD_JOIN")


def test_the_recovery_example_survives_two_kills() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHERS}
    done = subprocess.run([sys.executable, _EXAMPLE, "--kills", "2", "--steps", "1200"],
                          capture_output=True, text=True, timeout=130, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert out.count("driver: kill -9") == 2, out[-3000:]
    assert out.count("Starting a worker in its place") == 2, out[-3000:]
    assert "restart 2 of 2); the other workers go on." in out, out[-3000:]
    assert "Restarting every worker" not in out, out[-3000:]
    assert out.count(": same parameters") == 4 and "DIFFERENT" not in out, out[-3000:]
    assert out.count("s after the kill") == 2, out[-3000:]
    assert "driver: every rank ended with the same parameters" in out, out[-3000:]
