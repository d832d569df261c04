"""Point-to-point operations in the diagnostics: the flight recorder's p2p ring, the peer
report of a send or receive that times out, open p2p operations in the merged dumps; and the
job's dumps as one Chrome/Perfetto timeline (``accord flight-recorder --trace``)."""

from __future__ import annotations

import json
import threading

import numpy as np

import accord as dist
from accord.diagnostics import merge, trace
from accord.group.recorder import FlightRecorder
from accord.group.calls import CallSequencer
from accord.transport.wire import Fingerprint, FrameKind, pack_header
from harness import run_ranks


# -- the recorder --------------------------------------------------------------------------------
def test_the_recorder_keeps_p2p_operations_in_a_ring_of_their_own():
    rec = FlightRecorder(capacity=3)
    calls = CallSequencer(30.0, "rank 0", rec)  # (the one writer of the collectives' records)
    calls.end(calls.start(1, "all_reduce", Fingerprint(1, 0, 12, 4, -1)))
    sent = [rec.p2p_start("send", 1, 0, 64) for _ in range(3)]
    for entry in sent:
        rec.p2p_end(entry)
    anyone = rec.p2p_start("irecv", None, 9, 16)
    waiting = rec.p2p_start("recv", 2, 5, 8)
    assert [e["n"] for e in rec.p2p_entries()] == [3, 4, 5]  # the ring forgot 1 and 2
    assert [e["seq"] for e in rec.entries()] == [1]  # collectives are not pushed out
    post = rec.progress()
    assert [(o["op"], o["peer"], o["tag"]) for o in post["p2p_open"]] == [("irecv", None, 9),
                                                                         ("recv", 2, 5)]
    assert post["p2p_open_count"] == 2
    before = rec.stamp()
    rec.p2p_end(anyone, peer=3)  # a receive from any rank learns its source
    assert rec.stamp() != before
    rec.p2p_end(anyone, peer=3)  # a second end (waiter and progress thread) changes nothing
    assert rec.stats()["irecv"]["calls"] == 1 and rec.stats()["send"]["bytes"] == 3 * 64
    assert rec.p2p_entries()[-2]["peer"] == 3 and rec.p2p_entries()[-2]["state"] == "completed"
    rec.p2p_end(waiting, TimeoutError("nothing from rank 2"))
    post = rec.progress()
    assert "p2p_open" not in post and post["p2p_failed"]["tag"] == 5
    assert "nothing from rank 2" in post["p2p_failed"]["error"]
    assert rec.stats()["recv"] == {**rec.stats()["recv"], "calls": 1, "bytes": 0, "failed": 1}
    calls.end(calls.start(2, "barrier", None))  # a collective after it: the failure is history
    assert "p2p_failed" not in rec.progress()


def test_the_frame_kind_is_where_the_timeout_message_reads_it():
    header = pack_header(FrameKind.P2P, 0, 0, 0, 7, Fingerprint(0, 0, 0, 0, -1), 0)
    assert header[2] == FrameKind.P2P


# -- live groups -----------------------------------------------------------------------------------
def test_dumps_hold_each_ranks_p2p_operations(tmp_path):
    def body(rank):
        x = np.arange(4, dtype=np.float32)
        if rank == 0:
            dist.send(x, dst=1, tag=3)
            dist.isend(x, dst=1, tag=4).wait()
        else:
            dist.recv(x, src=0, tag=3)
            dist.irecv(x, src=None, tag=4).wait()  # any source
        dist.barrier()
        return dist.dump_flight_recorder(str(tmp_path / f"rank{rank}.json"))

    run_ranks(2, body)
    dumps = merge.load([str(tmp_path)])
    ops = {rank: [(o["op"], o["peer"], o["tag"], o["nbytes"], o["state"])
                  for o in d["groups"][0]["p2p"]] for rank, d in dumps.items()}
    assert ops == {0: [("send", 1, 3, 16, "completed"), ("isend", 1, 4, 16, "completed")],
                   1: [("recv", 0, 3, 16, "completed"), ("irecv", 0, 4, 16, "completed")]}
    report = merge.render(dumps)
    assert "rank 1: last p2p irecv from rank 0 (tag 4, 16 bytes) completed" in report, report
    assert "open p2p" not in report


def test_a_p2p_timeout_says_what_the_peer_was_doing(monkeypatch):
    monkeypatch.setenv("ACCORD_PROGRESS_INTERVAL", "0.1")

    def body(rank):
        x = np.zeros(2, dtype=np.int64)
        dist.all_reduce(x)
        try:  # each waits for a message the other never sends (different tags)
            dist.recv(x, src=1 - rank, tag=5 if rank == 0 else 7)
        except dist.DistTimeoutError as exc:
            return str(exc)
        return None

    texts = run_ranks(2, body, timeout=1.5)
    for rank, text in enumerate(texts):
        peer, tag = 1 - rank, 7 if rank == 0 else 5
        assert f"nothing from rank {peer}" in text, text
        assert "did it post the matching send, with the same tag?" in text, text
        assert f"Peer report (rank {peer}, as last posted in the store)" in text, text
        # the peer is still waiting, or its own receive has just timed out
        assert f"recv from rank {rank} (tag {tag}, 16 bytes)" in text, text
        assert "its last one, all_reduce" not in text  # not the vaguer "not in a collective"


def test_a_collective_timeout_still_speaks_of_collectives():
    done = threading.Event()

    def body(rank):
        if rank == 0:  # stays in the job without calling the all_reduce
            done.wait(10)
            return None
        try:
            dist.all_reduce(np.ones(2))
        except dist.DistTimeoutError as exc:
            return str(exc)
        finally:
            done.set()
        return None

    text = run_ranks(2, body, timeout=1.0, expect_failure=True)[1]
    assert "did every rank call the same collectives in the same order?" in text, text


# -- merging dumps ------------------------------------------------------------------------------
def _dump(rank, entries=(), p2p=(), size=2, at=100.0):
    return {"format": "accord-flight-recorder/1", "rank": rank, "world_size": size, "pid": 10 + rank,
            "host": "h", "time": at, "reason": "test",
            "groups": [{"name": "0", "desc": "default_pg", "id": 0, "ranks": list(range(size)), "rank": rank,
                        "entries": [{"seq": s, "op": op, "state": st, "start": t0,
                                     "end": None if st == "started" else t0 + 0.5,
                                     "dtype": "float32", "count": 4, "root": -1}
                                    for s, op, st, t0 in entries],
                        "p2p": [{"n": i + 1, "op": op, "peer": peer, "tag": tag, "nbytes": 8,
                                 "state": st, "start": t0,
                                 "end": None if st == "started" else t0 + 0.25}
                                for i, (op, peer, tag, st, t0) in enumerate(p2p)]}]}


def test_merge_pairs_each_open_p2p_operation_with_the_peers_side():
    dumps = {0: _dump(0, p2p=[("recv", 1, 5, "started", 10.0)]),
             1: _dump(1, p2p=[("recv", 0, 7, "started", 10.0)])}
    report = merge.render(dumps)
    assert ("rank 0: open p2p recv from rank 1 (tag 5, 8 bytes): rank 1 has no matching send "
            "open") in report, report
    assert "rank 1: open p2p recv from rank 0 (tag 7, 8 bytes)" in report, report
    dumps[1] = _dump(1, p2p=[("isend", 0, 5, "started", 10.0)])
    found = merge.analyse(dumps)[0]["open_p2p"]
    assert found[0]["rank"] == 0 and found[0]["counterpart"][0]["op"] == "isend"
    assert "they should meet" in merge.render(dumps)
    del dumps[1]
    assert "no dump from rank 1" in merge.render(dumps)


def test_dumps_without_p2p_still_merge():
    old = _dump(0, entries=[(1, "barrier", "completed", 1.0)])
    del old["groups"][0]["p2p"]
    analysis = merge.analyse({0: old, 1: _dump(1, entries=[(1, "barrier", "completed", 1.0)])})
    assert analysis[0]["divergence"] is None and analysis[0]["open_p2p"] == []


# -- the timeline ----------------------------------------------------------------------------------
def test_the_trace_has_a_row_per_rank_and_says_who_arrived_last():
    dumps = {0: _dump(0, entries=[(1, "all_reduce", "completed", 10.0),
                                  (2, "all_reduce", "started", 11.0)],
                      p2p=[("send", 1, 3, "completed", 10.6)], at=12.0),
             1: _dump(1, entries=[(1, "all_reduce", "completed", 10.2)],
                      p2p=[("recv", 0, 3, "completed", 10.7)], at=12.5)}
    doc = trace.trace(dumps)
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "rank 0 (h, pid 10)", 1: "rank 1 (h, pid 11)"}
    calls = {(e["pid"], e["name"]): e for e in events if e["ph"] == "X"}
    first = calls[(0, "all_reduce #1")]
    assert first["ts"] == 0.0 and first["dur"] == 500000.0  # µs from the job's first event
    assert first["args"]["last_arrival"] == "rank 1"
    assert abs(first["args"]["waited_for_last_us"] - 200000.0) < 1e-3
    assert calls[(1, "all_reduce #1")]["args"]["waited_for_last_us"] == 0.0
    stuck = calls[(0, "all_reduce #2 (started)")]  # open at the dump: it ends there
    assert stuck["dur"] == 1e6 and stuck["cname"] == "terrible"
    assert "last_arrival" not in stuck["args"]  # rank 1 never started it
    send, recv = calls[(0, "send to 1 (tag 3)")], calls[(1, "recv from 0 (tag 3)")]
    assert send["cat"] == recv["cat"] == "p2p" and send["tid"] != first["tid"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[(0, send["tid"])] == "group 0 (default_pg): p2p"
    assert [e["pid"] for e in events if e["ph"] == "i"] == [0, 1]  # where each rank dumped
    assert doc["otherData"]["time_origin_unix_s"] == 10.0


def test_the_cli_writes_the_trace(tmp_path, capsys):
    for rank in (0, 1):
        dump = _dump(rank, entries=[(1, "barrier", "completed", 5.0 + rank)])
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(dump))
    out = tmp_path / "timeline" / "trace.json"
    assert merge.main([str(tmp_path), "--trace", str(out)]) == 0
    captured = capsys.readouterr()
    assert "no divergence" in captured.out and "2 ranks, 2 calls" in captured.err
    events = json.loads(out.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 2
