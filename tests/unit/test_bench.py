"""accord bench: the ceiling rows (one loopback TCP socket pair, both ways and one way) run
once, in accord's own column, beside the collectives they bound."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

from accord.bench import cli, limits, noop_group, workloads
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


def test_list_form_rows_run_the_list_calls(tmp_path) -> None:
    out = tmp_path / "rows.json"
    assert cli.main(["--sizes", "64K", "--ops", "all_gather_list,reduce_scatter_list,all_to_all_list",
                     "--iters", "3", "--warmup", "1", "--quiet", "--json", str(out)]) == 0
    rows = {r["op"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"all_gather_list", "reduce_scatter_list", "all_to_all_list"}
    assert all(row["busbw_gbs"] > 0 for row in rows.values()), rows


def test_list_forms_call_the_list_api() -> None:
    seen = []

    class Api:
        def all_gather(self, outs, inp):
            seen.append(("all_gather", len(outs), inp.size))

        def reduce_scatter(self, out, ins):
            seen.append(("reduce_scatter", len(ins), out.size))

        def all_to_all(self, outs, ins):
            seen.append(("all_to_all", len(outs), len(ins)))

    for op in ("all_gather_list", "reduce_scatter_list", "all_to_all_list"):
        workloads.make_call(Api(), op, 5, 0, 3)()
    assert seen == [("all_gather", 3, 5), ("reduce_scatter", 3, 5), ("all_to_all", 3, 3)]


def test_the_transport_defaults_to_accord_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """ACCORD_TRANSPORT=tcp reaches the bench's ranks unless --transport says otherwise."""
    monkeypatch.setenv("ACCORD_TRANSPORT", "tcp")
    assert cli.build_parser().parse_args([]).transport == "tcp"
    assert cli.build_parser().parse_args(["--transport", "auto"]).transport == "auto"
    monkeypatch.delenv("ACCORD_TRANSPORT")
    assert cli.build_parser().parse_args([]).transport == "auto"


def test_several_runs_give_the_median_of_medians_with_ranges_and_ratios_run_by_run() -> None:
    from accord.bench import report

    def row(impl: str, us: float) -> report.Row:
        return report.Row(impl, "all_reduce", 8 << 20, 2, us, 2 * us, 0.0, 0.0)

    # run 2 caught the whole host slow: both sides took twice as long
    runs = [[row("accord", 1000.0), row("mpi", 2000.0)], [row("mpi", 4000.0), row("accord", 2000.0)],
            [row("accord", 1100.0), row("mpi", 2420.0)]]
    combined = {r.impl: r for r in report.combine(runs)}
    accord, mpi = combined["accord"], combined["mpi"]
    assert accord.median_us == 1100.0 and accord.runs_us == [1000.0, 2000.0, 1100.0]
    assert mpi.median_us == 2420.0 and mpi.p99_us == 4840.0
    assert accord.busbw_gbs == pytest.approx((8 << 20) / 1100e-6 / 1e9 * COLLECTIVES["all_reduce"].factor(2))
    text = report.table([accord, mpi], ["accord", "mpi"])
    # ratios are taken run by run (2.0, 2.0, 2.2): the slow run counts once, on both sides
    assert "2.00× (2.00–2.20)" in text and "1100.0 (1000.0–2000.0)" in text
    single = report.table(runs[0], ["accord", "mpi"])
    assert "2.00×" in single and "(" not in single.splitlines()[-1]


def test_runs_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--runs", "0", "--quiet"]) == 2
    assert "--runs" in capsys.readouterr().err


def test_ddp_rows_step_the_model_and_reduce_its_buckets() -> None:
    """ddp_step, ddp_floor (a hook that sends nothing), ddp_sync (a hook that only meets the
    other ranks: a barrier per bucket) and ddp_reduction (the all_reduce of the step's
    buckets alone): each runs on torch's API, at world 1 over gloo here."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    for op in workloads.DDP_ROWS:
        assert COLLECTIVES[op].runs_on("torch-accord", True) and not COLLECTIVES[op].runs_on("accord", False)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        reduced: list[int] = []
        barriers: list[bool] = []
        real, real_barrier = dist.all_reduce, dist.barrier
        dist.all_reduce = lambda t, *a, **k: (reduced.append(t.numel()), real(t, *a, **k))[1]
        dist.barrier = lambda *a, **k: (barriers.append(k.get("async_op", False)), real_barrier(*a, **k))[1]
        try:
            for op in workloads.DDP_ROWS:
                call = workloads.make_call(dist, op, 1, 0, 1, torch)
                call()
                call()
        finally:
            dist.all_reduce, dist.barrier = real, real_barrier
        # ddp_sync: async barriers only, one per bucket (DDP rebuilds its buckets after the
        # first step: one bucket, then two here)
        assert len(barriers) >= 2 and all(barriers)
        params = 1024 * 4096 + 4096 + 4096 * 1024 + 1024 + 1024 * 2048 + 2048 + 2048 * 1024 + 1024
        assert sum(reduced) == 2 * params  # ddp_reduction: every gradient, once per call
    finally:
        dist.destroy_process_group()


def test_barrier_timing_puts_a_barrier_before_each_timed_call() -> None:
    """--timing barrier (OSU style): one barrier after the warm-up, then one before each call;
    the loop (nccl-tests style) has only the first."""
    from accord.bench import runner

    events: list[str] = []

    class Api:
        def barrier(self) -> None:
            events.append("barrier")

    def call() -> None:
        events.append("call")

    assert len(runner._time_calls(call, 3, 1, Api(), "barrier")) == 3
    assert events == ["call", "barrier"] + ["barrier", "call"] * 3
    events.clear()
    runner._time_calls(call, 3, 1, Api())
    assert events == ["call", "barrier", "call", "call", "call"]
    assert cli.build_parser().parse_args(["--timing", "barrier"]).timing == "barrier"
    assert cli.build_parser().parse_args([]).timing == "loop"


def test_floor_rows_take_torchs_path_to_a_group_that_does_nothing_then_the_blocking_call() -> None:
    """all_reduce_functional_floor and all_reduce_async_floor: torch's functional (or async)
    path to the bench's no-op group, which leaves the tensor alone, then one blocking
    all_reduce on the implementation (world 1 over gloo here)."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    for op in ("all_reduce_functional_floor", "all_reduce_async_floor"):
        assert COLLECTIVES[op].runs_on("gloo", True) and not COLLECTIVES[op].runs_on("accord", False)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        blocking: list[object] = []
        real = dist.all_reduce

        def counted(t, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            if not k.get("async_op"):
                blocking.append(k.get("group"))
            return real(t, *a, **k)

        noop = noop_group._classes()[1]
        to_noop: list[int] = []
        real_noop = noop.allreduce
        noop.allreduce = lambda self, tensors, opts=None: (to_noop.append(len(tensors)), real_noop(self, tensors, opts))[1]
        dist.all_reduce = counted
        try:
            for op in ("all_reduce_functional_floor", "all_reduce_async_floor"):
                call = workloads.make_call(dist, op, 4, 0, 1, torch)
                call()
                call()
        finally:
            dist.all_reduce = real
            noop.allreduce = real_noop
        assert blocking == [None] * 4  # one blocking call on the default group per iteration
        assert to_noop == [1] * 4  # and torch's path to the no-op group before it
    finally:
        dist.destroy_process_group()


def test_ddp_bounds_divide_the_step_by_floor_plus_reduction_run_by_run() -> None:
    """The lines under a table with the DDP rows: each implementation's step over (floor +
    reduction) and over (sync + reduction), ratios taken run by run; none without them."""
    from accord.bench import report

    def row(impl: str, op: str, runs: list[float]) -> report.Row:
        return report.Row(impl, op, 0, 2, sorted(runs)[1], 0.0, 0.0, 0.0, runs)

    rows = [
        row("torch-accord", "ddp_step", [50.0, 60.0, 55.0]),
        row("torch-accord", "ddp_floor", [40.0, 50.0, 40.0]),
        row("torch-accord", "ddp_sync", [42.0, 54.0, 45.0]),
        row("torch-accord", "ddp_reduction", [10.0, 10.0, 10.0]),
        row("gloo", "ddp_step", [90.0, 90.0, 90.0]),  # (no reduction row: no line)
    ]
    lines = report.ddp_bounds(rows, ["torch-accord", "gloo"])
    assert len(lines) == 2 and lines[0].startswith("# DDP step against its bound")
    # floor: 50/50, 60/60, 55/50 -> 1.00 (1.00-1.10); sync: 50/52, 60/64, 55/55
    assert lines[1] == (
        "# torch-accord: step / (floor + reduction) 1.00 (1.00–1.10); "
        "step / (sync + reduction) 0.96 (0.94–1.00)"
    )
    assert report.ddp_bounds(rows[4:], ["gloo"]) == []
