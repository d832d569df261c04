"""``accord.heap``: once a world raised glibc's mmap threshold, a large torch tensor allocated
again and again reuses its pages instead of faulting in fresh ones every time. torch's
huge-page allocation (``THP_MEM_ALLOC_ENABLE=1``, which accord's ``init_process_group`` sets
unless it is set) asks ``posix_memalign`` for page-aligned blocks, which glibc's own dynamic
threshold never catches up with. Without huge pages, or with ``ACCORD_TORCH_HEAP=0``, malloc
is left alone. Each case runs in a fresh interpreter: the threshold is process-wide
and only rises."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc on Linux only"
)

PROGRAM = """
import json, resource, torch
from accord import heap
raised = heap.raise_mmap_threshold()
again = heap.raise_mmap_threshold()
faults = []
for _ in range(8):  # a 16 MiB tensor, made, written and freed 8 times
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.empty(4 << 20)
    x.fill_(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del x
print(json.dumps({"raised": raised, "again": again, "faults": faults}))
"""


def run(setting: str | None, huge_pages: str = "1") -> dict[str, Any]:
    env = dict(os.environ, THP_MEM_ALLOC_ENABLE=huge_pages)
    env.pop("ACCORD_TORCH_HEAP", None)
    if setting is not None:
        env["ACCORD_TORCH_HEAP"] = setting
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_large_tensor_reuses_its_pages_once_the_threshold_is_raised() -> None:
    got = run(None)
    assert got["raised"] is True and got["again"] is False
    assert got["faults"][-4:] == [0, 0, 0, 0], got  # (the first ones fault the heap in)


def test_turned_off_every_large_tensor_faults_in_fresh_pages() -> None:
    """What the raise is for: without it, every allocation is a fresh mapping (if this fails,
    glibc or torch no longer behave so, and the raise may no longer be needed)."""
    got = run("0")
    assert got["raised"] is False and got["again"] is False
    assert all(f > 0 for f in got["faults"][-4:]), got


def test_without_huge_pages_malloc_is_left_alone() -> None:
    """torch's plain allocation (64-byte aligned) is what glibc's own threshold catches up with."""
    got = run(None, huge_pages="0")
    assert got["raised"] is False and got["faults"][-4:] == [0, 0, 0, 0], got
