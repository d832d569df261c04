"""IPv6: a job whose store is at ``::1`` (tcp://[::1]:port) runs over shared memory and over
TCP; a store at a loopback address listens on loopback only."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = """
import sys, numpy as np, accord as dist
from datetime import timedelta
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group(init_method=f"tcp://[::1]:{port}", rank=rank, world_size=2,
                        timeout=timedelta(seconds=30))
x = np.ones(3) * (rank + 1)
dist.all_reduce(x)
t = np.zeros(2)
if rank == 0:
    dist.send(np.arange(2.0), dst=1)
else:
    dist.recv(t, src=0)
print("RESULT", rank, x.tolist(), t.tolist(), flush=True)
dist.destroy_process_group()
"""


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


def _free_port6() -> int:
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_a_job_whose_store_is_at_ipv6_loopback(transport, monkeypatch):
    monkeypatch.setenv("ACCORD_TRANSPORT", transport)
    port = str(_free_port6())
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(rank), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [proc.communicate(timeout=90) for proc in procs]
    for rank, (proc, (out, err)) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, err
        assert f"RESULT {rank} [3.0, 3.0, 3.0] [{'0.0, 0.0' if rank == 0 else '0.0, 1.0'}]" in out
        assert "InsecureListenWarning" not in err  # ::1 is loopback: nothing is exposed
