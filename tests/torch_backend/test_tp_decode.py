"""Tensor-parallel inference: examples/tp_decode.py on 2 ranks of backend accord decodes the
tokens of a one-process run of the same seeded model, and ``accord bench --tp`` prints a row
per implementation with sane numbers (no timing asserts: this host is shared)."""

from __future__ import annotations

import json
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


def test_bench_tp_prints_a_row_per_implementation(tmp_path) -> None:
    """accord, TP with free communication, and free with a barrier per collective (gloo's column is the same code on another
    backend's name, and the one-process job the decode without torch.distributed, which
    test_every_rank_decodes_the_one_process_runs_tokens runs: leaving them out keeps this
    test short)."""
    out = tmp_path / "tp.json"
    done = subprocess.run([sys.executable, "-m", "accord.bench", "--tp", *_TINY, "--tokens", "4",
                           "--warmup", "1", "--profiled", "2", "--prompt", "4", "--quiet",
                           "--compare", "free,sync", "--json", str(out)],
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {r["impl"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"accord", "free", "sync"}
    for impl, row in rows.items():
        assert row["ms_per_token"] > 0 and row["profiled_ms"] > 0, row
        assert 0 <= row["comm_share"] <= 1 and row["comm_ms"] <= row["profiled_ms"], row
        assert re.search(rf"^{impl} +\d+\.\d\d ", done.stdout, re.M), done.stdout
    events = rows["accord"]["events"]  # 2 layers: 2 all_reduces each, the embedding's, 1 all_gather
    assert rows["accord"]["comm_ms"] > 0 and events["accord:all_reduce"] == 5, events
    assert events["accord:all_gather"] == 1 and events["_c10d_functional::wait_tensor"] == 6, events
    # free: the same functional ops, none reaching accord's collectives (no accord: event)
    free = rows["free"]["events"]
    assert free["_c10d_functional::all_reduce"] == 5 and free["_c10d_functional::wait_tensor"] == 6, free
    assert not any(name.startswith("accord:") for name in free), free
    # sync: the same, each collective one barrier (its wait for the other rank), no data
    sync = rows["sync"]["events"]
    assert sync["accord:barrier"] == 6 and "accord:all_reduce" not in sync, sync
    assert re.search(r"^#   accord is \d+\.\d\d× sync's ms/token", done.stdout, re.M), done.stdout
    cost = re.search(r"^#   accord: (-?\d+\.\d\d) ms of (\d+\.\d\d) per token", done.stdout, re.M)
    assert cost and float(cost[2]) == round(rows["accord"]["ms_per_token"], 2), done.stdout
    assert "the same on every rank of every implementation" in done.stdout
