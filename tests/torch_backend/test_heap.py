"""``integrations.torch.heap``: once accord's torch backend raised glibc's mmap threshold, a
large torch tensor comes from the heap (glibc's brk area, pages reused), not from a fresh
mapping whose every page faults in on first touch; ``ACCORD_TORCH_HEAP=0`` leaves malloc
alone. Each case runs in a fresh interpreter: the threshold is process-wide and only rises."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc on Linux only"
)

PROGRAM = """
import json, torch
from accord.integrations.torch import heap
raised = heap.raise_mmap_threshold()
again = heap.raise_mmap_threshold()
x = torch.empty(4 << 20)  # 16 MiB: above glibc's initial threshold (128 KiB)
address = x.data_ptr()
lo = hi = 0
with open("/proc/self/maps") as maps:
    for line in maps:
        if line.rstrip().endswith("[heap]"):
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
print(json.dumps({"raised": raised, "again": again, "in_heap": lo <= address < hi}))
"""


def run(setting: str | None) -> dict[str, bool]:
    env = dict(os.environ)
    env.pop("ACCORD_TORCH_HEAP", None)
    if setting is not None:
        env["ACCORD_TORCH_HEAP"] = setting
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_large_tensor_comes_from_the_heap_once_the_threshold_is_raised() -> None:
    assert run(None) == {"raised": True, "again": False, "in_heap": True}


def test_turned_off_a_large_tensor_is_a_fresh_mapping_as_before() -> None:
    assert run("0") == {"raised": False, "again": False, "in_heap": False}
