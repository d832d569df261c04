"""Many clients at once against accord's TCPStore server (the scenario of load_bench.py): every
connection's add, set and waiting get complete, for accord's clients and for torch's.

A slice runs by default; the full loads (18,000 accord clients, 2,000 torch clients) with
ACCORD_LONG_TESTS=1. Times are the bench's business, not asserted here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess
BENCH = Path(__file__).with_name("load_bench.py")
long_test = pytest.mark.skipif(os.environ.get("ACCORD_LONG_TESTS") != "1",
                               reason="a long test: set ACCORD_LONG_TESTS=1")


def _isolated_dns() -> list[str]:
    """A prefix running the clients where DNS fails at once (a namespace with only loopback),
    if we may: torch's client looks up its socket's address on every connect, and a resolver
    that never answers makes some of those wait 5 s. Empty when not root."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    name = f"accload{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, timeout=20)
    if made.returncode != 0:
        return []
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=20)
    return ["ip", "netns", "exec", name]


def _bench(client: str, procs: int, clients: int, prefix: list[str] = ()) -> None:  # type: ignore[assignment]
    try:
        done = subprocess.run([*prefix, sys.executable, str(BENCH), "--client", client,
                               "--procs", str(procs), "--clients", str(clients)],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    finally:
        if prefix:
            subprocess.run(["ip", "netns", "del", prefix[-1]], capture_output=True, timeout=20)
    assert done.returncode == 0, done.stdout + done.stderr
    counts = re.search(r"counter read \[([\d, ]+)\]", done.stdout)
    assert counts is not None, done.stdout
    assert max(int(c) for c in counts.group(1).split(",")) == procs * clients


def test_accord_clients_slice() -> None:
    _bench("accord", 4, 250)


def test_torch_clients_slice() -> None:
    pytest.importorskip("torch")
    _bench("torch", 2, 40, _isolated_dns())


@long_test
def test_18000_accord_clients() -> None:
    _bench("accord", 6, 3000)


@long_test
def test_2000_torch_clients_in_4_processes() -> None:
    pytest.importorskip("torch")
    _bench("torch", 4, 500, _isolated_dns())
