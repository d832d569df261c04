"""Hierarchical collectives (group/hierarchy.py) on simulated hosts: ranks as threads over the
loopback transport, with a host name per rank, shared memory inside each "host".

Closed forms for every hierarchical collective (all_reduce, broadcast, all_gather,
reduce_scatter, barrier) at several layouts, counts around the slice split, every kind of
ReduceOp; layouts that stay flat; ACCORD_ALGORITHM's choice; a rank that dies in the middle.
The same on real processes and network namespaces: tests/launcher/test_hierarchy_hosts.py.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import accord
from accord.transport.loopback import LoopbackFabric
from harness import run_ranks

LAYOUTS = {
    "2x2": ["a", "a", "b", "b"],
    "2x2-interleaved": ["a", "b", "a", "b"],
    "2x3": ["a", "a", "a", "b", "b", "b"],
    "3x2-interleaved": ["a", "b", "c", "a", "b", "c"],
}
FLAT_LAYOUTS = {"uneven": ["a", "a", "b", "b", "c"], "one-per-host": ["a", "b"], "one-host": ["a", "a", "a"]}


def on_hosts(hosts: list[str], body, **kwargs):
    return run_ranks(len(hosts), body, fabric=LoopbackFabric(len(hosts), shared_memory=True, hosts=hosts),
                     **kwargs)


def every_collective(rank: int) -> dict:
    n = accord.get_world_size()
    out: dict = {"hierarchy": accord.GroupMember.WORLD.engine.hierarchy is not None}
    for count in (0, 1, 2, 5, 1001):
        x = np.arange(count, dtype=np.int64) + rank
        accord.all_reduce(x)
        out[f"sum{count}"] = x.tolist()
    m = np.array([rank, -rank, 7], np.int32)
    accord.all_reduce(m, op=accord.ReduceOp.MAX)
    out["max"] = m.tolist()
    f = np.full(7, rank + 1.0, np.float64)
    accord.all_reduce(f, op=accord.ReduceOp.AVG)
    out["avg"] = f.tolist()
    i = np.full(3, 10 * rank + 1, np.int64)
    accord.all_reduce(i, op=accord.ReduceOp.AVG)
    out["avg_int"] = i.tolist()
    p = np.full(4, rank + 1.0, np.float32)
    accord.all_reduce(p, op=accord._make_nccl_premul_sum(2.0))
    out["premul"] = p.tolist()
    for root in range(n):
        b = np.full(6, rank, np.int16)
        accord.broadcast(b, src=root)
        out[f"bcast{root}"] = b.tolist()
    outs = [np.zeros(r + 1, np.int32) for r in range(n)]
    accord.all_gather(outs, np.full(rank + 1, rank, np.int32))
    out["all_gather"] = [o.tolist() for o in outs]
    into = np.zeros(2 * n, np.float32)
    accord.all_gather_into_tensor(into, np.array([rank, -rank], np.float32))
    out["all_gather_into_tensor"] = into.tolist()
    res = np.zeros(rank + 1, np.int64)
    accord.reduce_scatter(res, [np.full(j + 1, 10 * r + j, np.int64) for j in range(n) for r in [rank]])
    out["reduce_scatter"] = res.tolist()
    one = np.zeros(3, np.float64)
    accord.reduce_scatter_tensor(one, np.arange(3 * n, dtype=np.float64) + rank, op=accord.ReduceOp.AVG)
    out["reduce_scatter_tensor"] = one.tolist()
    accord.barrier()
    w = accord.all_reduce(np.full(2, rank, np.int64), async_op=True)
    w.wait()
    out["async"] = w.result()[0].tolist() if w.result() else None
    return out


def expected(rank: int, n: int) -> dict:
    return {
        **{f"sum{c}": [sum(r + k for r in range(n)) for k in range(c)] for c in (0, 1, 2, 5, 1001)},
        "max": [n - 1, 0, 7],
        "avg": [sum(r + 1.0 for r in range(n)) / n] * 7,
        "avg_int": [int(sum(10 * r + 1 for r in range(n)) / n)] * 3,
        "premul": [2.0 * sum(r + 1 for r in range(n))] * 4,
        **{f"bcast{root}": [root] * 6 for root in range(n)},
        "all_gather": [[r] * (r + 1) for r in range(n)],
        "all_gather_into_tensor": [v for r in range(n) for v in (r, -r)],
        "reduce_scatter": [sum(10 * r + rank for r in range(n))] * (rank + 1),
        "reduce_scatter_tensor": [(sum(range(n)) + n * (3 * rank + k)) / n for k in range(3)],
    }


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_hierarchical_collective(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # small all_reduce and broadcast are flat by default: force the hierarchical ones here
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=hierarchical,broadcast=hierarchical")
    hosts = LAYOUTS[layout]
    n = len(hosts)
    for rank, got in enumerate(on_hosts(hosts, every_collective)):
        assert got.pop("hierarchy") is True
        assert got.pop("async") == [sum(range(n))] * 2
        assert got == expected(rank, n), rank


@pytest.mark.parametrize("layout", list(FLAT_LAYOUTS))
def test_layouts_that_stay_flat(layout: str) -> None:
    hosts = FLAT_LAYOUTS[layout]
    for rank, got in enumerate(on_hosts(hosts, every_collective)):
        assert got.pop("hierarchy") is False
        got.pop("async")
        assert got == expected(rank, len(hosts)), rank


def test_bfloat16_torch_tensors() -> None:
    torch = pytest.importorskip("torch")

    def body(rank: int) -> list[float]:
        t = torch.arange(6, dtype=torch.bfloat16) + rank
        accord.all_reduce(t)
        return t.float().tolist()

    for got in on_hosts(LAYOUTS["2x2"], body):
        assert got == [float(sum(r + k for r in range(4))) for k in range(6)]


def test_the_choice_and_accord_algorithm(monkeypatch: pytest.MonkeyPatch) -> None:
    def names(rank: int) -> dict:
        pg = accord.GroupMember.WORLD
        x = np.ones(1 << 16, np.float32)
        accord.all_reduce(x)
        return {c: pg.engine.choose_algorithm(c, 1 << 20).name for c in
                ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "reduce", "all_to_all")} \
            | {"sum": float(x[0]), "small": [pg.engine.choose_algorithm(c, 8).name for c in
                                            ("all_reduce", "broadcast", "all_gather", "barrier")]}

    got = on_hosts(LAYOUTS["2x2"], names)[0]
    small = got.pop("small")
    assert got == {"all_reduce": "hierarchical", "broadcast": "hierarchical", "all_gather": "hierarchical",
                   "reduce_scatter": "hierarchical", "barrier": "hierarchical", "reduce": got["reduce"],
                   "all_to_all": got["all_to_all"], "sum": 4.0}
    # small all_reduce and broadcast stay flat (measured quicker), the others do not
    assert small[0] != "hierarchical" and small[1] != "hierarchical" and small[2:] == ["hierarchical"] * 2
    assert got["reduce"] != "hierarchical" and got["all_to_all"] != "hierarchical"
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=ring")
    got = on_hosts(LAYOUTS["2x2"], names)[0]
    assert got["all_reduce"] == "ring" and got["broadcast"] == "hierarchical" and got["sum"] == 4.0
    monkeypatch.setenv("ACCORD_ALGORITHM", "")
    monkeypatch.setenv("ACCORD_HIERARCHY", "0")
    got = on_hosts(LAYOUTS["2x2"], names)[0]
    assert "hierarchical" not in got.values() and got["sum"] == 4.0
    monkeypatch.delenv("ACCORD_HIERARCHY")
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=hierarchical")

    def single_host(rank: int) -> None:
        accord.all_reduce(np.ones(4))

    with pytest.raises(AssertionError, match="all_reduce=hierarchical"):
        run_ranks(2, single_host)


def test_a_subgroup_across_hosts_is_hierarchical_and_destroyed_with_its_inner_groups() -> None:
    def body(rank: int) -> dict:
        group = accord.new_group([0, 1, 3, 4])  # hosts a: 0 1, b: 3 4 (of a a a b b b)
        out = {}
        if group is not accord.GroupMember.NON_GROUP_MEMBER:
            x = np.full(1 << 15, rank, np.int64)  # 256 KiB: hierarchical by default
            accord.all_reduce(x, group=group)
            out = {"sum": x[:3].tolist(), "hierarchy": group.engine.hierarchy is not None,
                   "inner": len(group.companions)}
            accord.destroy_process_group(group)
            out["after"] = len(group.companions)
        accord.barrier()
        return out

    results = on_hosts(LAYOUTS["2x3"], body)
    for rank in (0, 1, 3, 4):
        assert results[rank] == {"sum": [8] * 3, "hierarchy": True, "inner": 2, "after": 0}
    assert results[2] == results[5] == {}


@pytest.mark.parametrize("pipeline, count, dies_at", [
    ("0", 1 << 18, 5),  # one piece
    ("65536", 1 << 18, 5),  # 16 pieces in flight
    ("auto", 1 << 20, 1),  # in the second measured call (PROBE_BYTES: its barriers)
])
def test_a_rank_dying_in_the_middle_is_named_quickly(pipeline: str, count: int, dies_at: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_HIERARCHY_PIPELINE_BYTES", pipeline)
    fabric = LoopbackFabric(4, shared_memory=True, hosts=LAYOUTS["2x2"])

    def body(rank: int) -> tuple[str, str, float, int]:
        data = np.ones(count, np.float32)
        for i in range(20):
            if rank == 3 and i == dies_at:
                fabric.kill(3)
                return ("killed", "", 0.0, 0)
            start = time.monotonic()
            try:
                accord.all_reduce(data)
            except accord.DistError as exc:
                measured = len(accord.GroupMember.WORLD.engine.hierarchy.measured)
                return (type(exc).__name__, str(exc), time.monotonic() - start, measured)
        return ("finished", "", 0.0, 0)

    results = run_ranks(4, body, fabric=fabric, expect_failure=True, timeout=30)
    for rank in (0, 1, 2):
        kind, message, after, measured = results[rank]
        assert kind == "PeerError" and "rank 3" in message and after < 2.0, (rank, message[:600])
        assert measured == (1 if pipeline == "auto" else 0)  # auto: the second probe broke


@pytest.mark.parametrize("layout", ["2x2", "3x2-interleaved"])
def test_a_pipelined_all_reduce_in_pieces(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of ACCORD_HIERARCHY_PIPELINE_BYTES, at most 32, each of L elements or more:
    results as one piece gives, for every count around the cuts and every op kind."""
    monkeypatch.setenv("ACCORD_HIERARCHY_PIPELINE_BYTES", "4096")
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=hierarchical")
    hosts = LAYOUTS[layout]
    n = len(hosts)
    counts = (511, 512, 1024, 1537, 5000, 20000)  # int64: 1, 1, 2, 3, 9, 39 → 32 pieces

    def body(rank: int) -> dict:
        pg = accord.GroupMember.WORLD
        out: dict = {}
        for count in counts:
            x = np.arange(count, dtype=np.int64) * (rank + 1)
            accord.all_reduce(x)
            out[count] = (x == np.arange(count) * sum(range(1, n + 1))).all()
            out[f"pieces{count}"] = len(pg.engine.hierarchy.pieces(x.nbytes, count))
        f = np.full(3001, rank + 1.0, np.float32)
        accord.all_reduce(f, op=accord.ReduceOp.AVG)
        out["avg"] = set(f.tolist())
        p = np.full(3001, rank + 1.0, np.float64)
        accord.all_reduce(p, op=accord._make_nccl_premul_sum(2.0))
        out["premul"] = set(p.tolist())
        m = np.arange(4000, dtype=np.int32) - rank
        accord.all_reduce(m, op=accord.ReduceOp.MIN)
        out["min"] = (m == np.arange(4000) - (n - 1)).all()
        return out

    for got in on_hosts(hosts, body):
        assert all(got[c] for c in counts) and got["min"]
        assert [got[f"pieces{c}"] for c in counts] == [1, 1, 2, 3, 9, 32]
        assert got["avg"] == {sum(range(1, n + 1)) / n} and got["premul"] == {2.0 * sum(range(1, n + 1))}


@pytest.mark.parametrize("layout", ["2x2", "3x2-interleaved"])
def test_a_pipelined_broadcast_in_pieces(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the all_reduce agreed to pipeline, broadcast runs in the same pieces: from every
    root, for counts around the cuts; before that agreement it is one piece."""
    monkeypatch.setenv("ACCORD_HIERARCHY_PIPELINE_BYTES", "4096")
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=hierarchical, broadcast=hierarchical")
    hosts = LAYOUTS[layout]
    n = len(hosts)
    counts = (3, 1537, 20000)  # int64: one piece, 3, 32

    def body(rank: int) -> dict:
        pg = accord.GroupMember.WORLD
        out: dict = {}
        early = np.full(20000, rank, np.int64)
        accord.broadcast(early, src=n - 1)  # before any all_reduce: not agreed, one piece
        out["early"] = bool((early == n - 1).all())
        accord.all_reduce(np.ones(8, np.int64))  # the members agree here
        for count in counts:
            out[f"pieces{count}"] = len(pg.engine.hierarchy.pieces(count * 8, count))
            for root in range(n):
                x = np.arange(count, dtype=np.int64) * (rank + 1) if rank == root else \
                    np.full(count, -1, np.int64)
                accord.broadcast(x, src=root)
                out[f"{count}/{root}"] = bool((x == np.arange(count) * (root + 1)).all())
        return out

    for got in on_hosts(hosts, body):
        assert got["early"]
        assert [got[f"pieces{c}"] for c in counts] == [1, 3, 32]
        assert all(got[f"{c}/{root}"] for c in counts for root in range(n)), got


def test_the_members_agree_on_pipelining() -> None:
    """One member that does not pipeline (fewer cores, another setting): none does."""
    def body(rank: int) -> tuple:
        pg = accord.GroupMember.WORLD
        pg.engine.hierarchy.pipeline_bytes = 0 if rank == 2 else 4096
        x = np.ones(10000, np.float32)
        accord.all_reduce(x)
        return set(x.tolist()), len(pg.engine.hierarchy.pieces(x.nbytes, x.size))

    for got in on_hosts(LAYOUTS["2x2"], body):
        assert got == ({4.0}, 1)


@pytest.mark.parametrize("pipelines", [True, False])
def test_auto_pipelining_is_measured(pipelines: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Auto: the first PROBE_CALLS all_reduces of PROBE_BYTES or more run in one piece and
    time their stages; then every member pipelines, or none does, by the same numbers (the
    bounds forced either way here), in pieces sized by the network's measured speed."""
    from accord.group import hierarchy

    for name in ("NETWORK_BOUND", "FEW_CORES_BOUND"):
        monkeypatch.setattr(hierarchy, name, 0.0 if pipelines else float("inf"))
    monkeypatch.setattr(hierarchy, "PIECE_SECONDS", 1e-9)  # the smallest pieces, whatever the speed
    count = hierarchy.PROBE_BYTES // 4

    def body(rank: int) -> dict:
        pg = accord.GroupMember.WORLD
        pg.engine.hierarchy.pipeline_bytes = None  # auto
        pg.engine.hierarchy.bound = 0.0 if pipelines else float("inf")
        out: dict = {"cuts": []}
        for call in range(hierarchy.PROBE_CALLS + 1):
            x = np.full(count, rank + 1.0, np.float32)
            out["cuts"].append(len(pg.engine.hierarchy.pieces(x.nbytes, count)))
            accord.all_reduce(x)
            out[f"ok{call}"] = bool((x == 10.0).all())
        small = np.full(1000, rank, np.int64)  # below PROBE_BYTES: measures nothing
        accord.all_reduce(small)
        out["small"] = bool((small == 6).all())
        out["measured"] = len(pg.engine.hierarchy.measured)
        out["decided"] = pg.engine.hierarchy.measured[-1]
        return out

    got = on_hosts(LAYOUTS["2x2"], body)
    low = hierarchy.AUTO_PIECE_LIMITS[0]
    for one in got:
        assert all(one[f"ok{c}"] for c in range(hierarchy.PROBE_CALLS + 1)) and one["small"]
        *probes, after = one["cuts"]
        assert probes == [1] * hierarchy.PROBE_CALLS
        assert after == (hierarchy.PROBE_BYTES // low if pipelines else 1)
        assert one["measured"] == hierarchy.PROBE_CALLS + 1  # the probes, then what decided
    assert len({one["decided"] for one in got}) == 1  # the same numbers on every member


def test_auto_piece_size() -> None:
    from accord.group.hierarchy import _piece_bytes

    mib = 1 << 20
    assert _piece_bytes(16 * mib, 0.067) == 256 << 10  # 2 Gbit/s: 0.5 MiB in 2 ms, floored
    assert _piece_bytes(16 * mib, 0.0134) == 2 * mib  # 10 Gbit/s
    assert _piece_bytes(16 * mib, 0.001) == 4 * mib  # the largest
    assert _piece_bytes(16 * mib, 10.0) == 256 << 10  # the smallest


def test_one_member_that_measures_makes_every_member_measure() -> None:
    def body(rank: int) -> int | None:
        pg = accord.GroupMember.WORLD
        pg.engine.hierarchy.pipeline_bytes = None if rank == 1 else 4096
        accord.all_reduce(np.ones(100000, np.float32))  # above the small-message size
        return pg.engine.hierarchy._agreed

    from accord.group.hierarchy import _MEASURE
    assert on_hosts(LAYOUTS["2x2"], body) == [_MEASURE] * 4


def test_where_the_choice_switches() -> None:
    small, segment = 64 << 10, 1 << 20  # ACCORD_SMALL_MESSAGE_BYTES, ACCORD_SEGMENT_BYTES

    def body(rank: int) -> dict:
        pg = accord.GroupMember.WORLD
        out = {"names": [pg.engine.choose_algorithm("all_reduce", small).name == "hierarchical",
                         pg.engine.choose_algorithm("all_reduce", small + 4).name == "hierarchical",
                         pg.engine.choose_algorithm("broadcast", segment - 4).name == "hierarchical",
                         pg.engine.choose_algorithm("broadcast", segment).name == "hierarchical"]}
        for nbytes in (small, small + 4):
            x = np.full(nbytes // 4, rank + 1, np.int32)
            accord.all_reduce(x)
            out[f"all_reduce{nbytes}"] = (int(x.min()), int(x.max()))
        for nbytes in (segment - 4, segment):
            b = np.full(nbytes // 4, rank, np.float32)
            accord.broadcast(b, src=2)
            out[f"broadcast{nbytes}"] = (float(b.min()), float(b.max()))
        return out

    for got in on_hosts(LAYOUTS["2x2-interleaved"], body):
        assert got.pop("names") == [False, True, False, True]
        assert set(got.values()) == {(10, 10), (2.0, 2.0)}, got
