"""Tensor-parallel inference: examples/tp_decode.py on 2 ranks of backend accord decodes the
tokens of a one-process run of the same seeded model."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.timeout(120)]

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tp_decode.py")
_TINY = ["--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "256"]


def _start(*launcher: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *launcher, _EXAMPLE, "--tokens", "12", *_TINY],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _tokens(job: subprocess.Popen) -> dict[str, str]:
    try:
        out, _ = job.communicate(timeout=100)
    finally:
        job.kill()
    assert job.returncode == 0, out[-3000:]
    return dict(re.findall(r"^(?:\[rank\d\]: )?(.+?) tokens ([\d ]+)$", out, re.M))


def test_every_rank_decodes_the_one_process_runs_tokens() -> None:
    both = _start("-m", "accord.run", "--nproc-per-node", "2"), _start()  # (side by side)
    ranks, alone = _tokens(both[0]), _tokens(both[1])
    assert list(alone) == ["one process"] and len(alone["one process"].split()) == 12
    assert sorted(ranks) == ["rank 0/2 (accord)", "rank 1/2 (accord)"], ranks
    assert set(ranks.values()) == {alone["one process"]}
