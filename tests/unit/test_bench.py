"""accord bench: the ceiling rows (one loopback TCP socket pair, both ways and one way) run
once, in accord's own column, beside the collectives they bound."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

from accord.bench import cli, limits
from accord.bench.workloads import COLLECTIVES


def test_ceiling_rows_run_only_in_accords_own_column() -> None:
    for op in ("tcp_limit", "tcp_oneway"):
        rows = COLLECTIVES[op]
        assert rows.ceiling and rows.runs_on("accord", False)
        assert not rows.runs_on("gloo", True) and not rows.runs_on("torch-accord", True)
        assert not rows.runs_on("mpi", False)
    assert COLLECTIVES["all_reduce"].runs_on("mpi", False)
    assert COLLECTIVES["ddp_step"].runs_on("gloo", True) and not COLLECTIVES["ddp_step"].runs_on("accord", False)


def test_exchange_moves_both_ways_at_once() -> None:
    """More than the socket buffers hold each way: neither side may wait to send until it
    has received (that would deadlock), and every byte lands in order."""
    a, b = socket.socketpair()
    for sock in (a, b):
        sock.setblocking(False)
    size = 8 << 20
    data = [np.arange(size, dtype=np.uint8) * k for k in (3, 7)]
    got = [np.zeros(size, dtype=np.uint8) for _ in range(2)]

    def side(k: int, sock: socket.socket) -> None:
        import select
        poller = select.epoll()
        poller.register(sock.fileno(), select.EPOLLIN)
        limits.exchange(sock, poller, memoryview(data[k]), memoryview(got[k]))

    other = threading.Thread(target=side, args=(1, b))
    other.start()
    side(0, a)
    other.join(30)
    assert not other.is_alive()
    assert np.array_equal(got[0], data[1]) and np.array_equal(got[1], data[0])


def test_bench_prints_the_ceiling_beside_all_reduce(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    assert cli.main(["--transport", "tcp", "--sizes", "64K", "--ops", "all_reduce,tcp_limit,tcp_oneway",
                     "--iters", "3", "--warmup", "1", "--quiet", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    rows = {r["op"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"all_reduce", "tcp_limit", "tcp_oneway"}
    for op, row in rows.items():
        assert row["impl"] == "accord" and row["nbytes"] == 64 << 10
        assert row["busbw_gbs"] > 0 and row["median_us"] > 0, row
        assert op in table


def test_the_transport_defaults_to_accord_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """ACCORD_TRANSPORT=tcp reaches the bench's ranks unless --transport says otherwise."""
    monkeypatch.setenv("ACCORD_TRANSPORT", "tcp")
    assert cli.build_parser().parse_args([]).transport == "tcp"
    assert cli.build_parser().parse_args(["--transport", "auto"]).transport == "auto"
    monkeypatch.delenv("ACCORD_TRANSPORT")
    assert cli.build_parser().parse_args([]).transport == "auto"
