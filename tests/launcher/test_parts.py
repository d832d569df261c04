"""The launcher's pieces in process: the env contract, rank layout, verdicts, reports, layering."""

from __future__ import annotations

import ast
import dataclasses
import json
import pathlib
import time

import pytest

import accord
from accord.launcher.env import JobFacts, WorkerPlace, worker_env
from accord.launcher.liveness import Liveness, heartbeat_key
from accord.launcher.nodes import NodeRecord, RoundInfo, is_local_address
from accord.launcher.options import LaunchConfig
from accord.launcher.procs import LocalGroup
from accord.launcher.report import Failure, format_report, make_failure, read_error_file
from accord.launcher.rounds import FAILED, INTERRUPTED, RESIZE, RESTART, STOPPED, SUCCEEDED, \
    NodeStatus, RoundChannel, Verdict, decide
from accord.store.hash_store import HashStore

LAUNCHER = pathlib.Path(accord.__file__).parent / "launcher"
FORBIDDEN = {"group", "collectives", "transport", "api", "world", "backends"}


def _info(restart: int = 0, me: int = 1) -> RoundInfo:
    nodes = (NodeRecord(0, "a", 10, 2, "trainer"), NodeRecord(1, "b", 11, 3, "reader"),
             NodeRecord(2, "c", 12, 1, "trainer"))
    return RoundInfo(restart, me, nodes, "10.0.0.1", 29500)


def test_ranks_follow_node_order_and_roles():
    places = _info(me=2).places()
    assert [(p.rank, p.local_rank, p.world_size, p.local_world_size) for p in places] == \
        [(5, 0, 6, 1)]
    assert (places[0].group_rank, places[0].group_world_size) == (2, 3)
    assert (places[0].role_rank, places[0].role_world_size) == (2, 3)  # after node 0's two
    reader = _info(me=1).places()
    assert [p.rank for p in reader] == [2, 3, 4] and [p.role_rank for p in reader] == [0, 1, 2]


def test_worker_env_writes_the_contract_over_the_launchers_environment():
    place = WorkerPlace(5, 1, 8, 2, 2, 4, 3, 6)
    job = JobFacts("trainer", "10.0.0.1", 29500, "run9", 1, 3, "SIGTERM")
    env = worker_env({"RANK": "stale", "PATH": "/bin"}, place, job, "/tmp/e.json")
    assert env["PATH"] == "/bin" and env["RANK"] == "5" and env["LOCAL_RANK"] == "1"
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("8", "2")
    assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == ("2", "4")
    assert (env["ROLE_NAME"], env["ROLE_RANK"], env["ROLE_WORLD_SIZE"]) == ("trainer", "3", "6")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert env["TORCHELASTIC_RUN_ID"] == "run9" and env["TORCHELASTIC_RESTART_COUNT"] == "1"
    assert env["TORCHELASTIC_MAX_RESTARTS"] == "3" and env["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json"
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True" and env["OMP_NUM_THREADS"] == "1"
    assert worker_env({"OMP_NUM_THREADS": "4"}, place, job, "e")["OMP_NUM_THREADS"] == "4"


def test_a_replacement_gets_its_places_environment_and_accord_join():
    place = WorkerPlace(5, 1, 8, 2, 2, 4, 3, 6)
    job = JobFacts("trainer", "10.0.0.1", 29500, "run9", 1, 3, "SIGTERM")
    first = worker_env({"ACCORD_JOIN": "1"}, place, job, "e")  # never inherited
    joining = worker_env({}, place, job, "e2", joining=True)
    assert "ACCORD_JOIN" not in first and joining["ACCORD_JOIN"] == "1"
    assert {k: v for k, v in joining.items() if k not in ("ACCORD_JOIN", "TORCHELASTIC_ERROR_FILE")} \
        == {k: v for k, v in first.items() if k != "TORCHELASTIC_ERROR_FILE"}


def test_a_replaced_worker_leaves_its_place_to_the_new_one():
    group = LocalGroup()
    group.start([["sh", "-c", "exit 3"], ["sh", "-c", "sleep 30"]], [{}, {}])
    try:
        first = group.next_exit(10)
        assert (first.local_rank, first.returncode) == (0, 3) and group.running() == [1]
        with pytest.raises(RuntimeError, match="has not ended"):
            group.replace(1, ["true"], {})
        new = group.replace(0, ["sh", "-c", "exit 0"], {})
        assert new.pid != first.pid and group.procs[0] is new
        second = group.next_exit(10)
        assert (second.local_rank, second.pid, second.returncode) == (0, new.pid, 0)
        assert group.running() == [1]
    finally:
        group.stop(5)
    assert group.running() == []


def _cfg(max_restarts: int, nnodes: tuple[int, int] = (3, 3)) -> LaunchConfig:
    return LaunchConfig("train.py", [], min_nodes=nnodes[0], max_nodes=nnodes[1],
                        max_restarts=max_restarts)


def _failure(rank: int, when: float, exitcode: int = 1, node: int = 0) -> Failure:
    return Failure(rank, rank % 2, node, "h", 100 + rank, exitcode, when, f"boom {rank}", "tb")


def test_verdict_picks_the_earliest_failure_and_restarts_while_allowed():
    info = _info(restart=0)
    statuses = {0: NodeStatus(0, "a", STOPPED, [_failure(1, 20.0)]),
                1: NodeStatus(1, "b", FAILED, [_failure(3, 10.0, -9, node=1)]),
                2: NodeStatus(2, "c", SUCCEEDED)}
    verdict = decide(info, statuses, _cfg(max_restarts=1), lost_after=30)
    assert verdict.outcome == RESTART and verdict.root.rank == 3
    assert [f.rank for f in verdict.others] == [1]
    assert (verdict.nnodes, verdict.survivors) == (3, 3)
    assert decide(_info(restart=1), statuses, _cfg(1), 30).outcome == FAILED
    assert Verdict.decode(verdict.encode()) == verdict


def test_workers_replaced_in_place_count_as_restarts():
    statuses = {0: NodeStatus(0, "a", FAILED, [_failure(1, 20.0)]),
                1: NodeStatus(1, "b", STOPPED), 2: NodeStatus(2, "c", STOPPED)}
    verdict = decide(_info(restart=1), statuses, _cfg(max_restarts=4), 30, replaced=2)
    assert verdict.outcome == RESTART and verdict.replaced == 2
    assert verdict.restarts(1) == 3  # the next attempt is number 4
    assert Verdict.decode(verdict.encode()) == verdict
    assert decide(_info(restart=1), statuses, _cfg(4), 30, replaced=3).outcome == FAILED
    ok = {n: NodeStatus(n, "x", SUCCEEDED) for n in range(3)}
    assert decide(_info(), ok, _cfg(0), 30, replaced=5).outcome == SUCCEEDED


def test_a_replacement_is_counted_only_while_restarts_are_left():
    store = HashStore()
    channel = RoundChannel(store, _info(restart=1), None, lambda: None)
    assert [channel.take_replacement(_cfg(3)) for _ in range(3)] == [2, 3, None]
    assert channel.replacements() == 2


def test_a_failure_blamed_on_a_peer_is_not_the_root_cause_even_when_it_came_first():
    """Rank 0 exits first with PeerError ('rank 1 raised ValueError …'); rank 1, whose
    exception it was, exits later (its exit hooks take longer): rank 1 is the root cause."""
    consequence = dataclasses.replace(_failure(0, 10.0),
        message="PeerError: barrier #3 on rank 0: rank 1 raised ValueError: bad batch")
    cause = dataclasses.replace(_failure(1, 10.4), message="ValueError: bad batch")
    statuses = {0: NodeStatus(0, "a", FAILED, [consequence, cause])}
    verdict = decide(_info(), statuses, _cfg(max_restarts=0), lost_after=30)
    assert verdict.root.rank == 1 and [f.rank for f in verdict.others] == [0]
    alone = decide(_info(), {0: NodeStatus(0, "a", FAILED, [consequence])}, _cfg(0), 30)
    assert alone.root.rank == 0  # with nothing else to blame, it is still reported


def test_verdict_for_success_interruption_and_a_lost_node():
    info = _info()
    ok = {n: NodeStatus(n, "x", SUCCEEDED) for n in range(3)}
    assert decide(info, ok, _cfg(0), 30).outcome == SUCCEEDED
    interrupted = {**ok, 2: NodeStatus(2, "c", INTERRUPTED, detail="SIGINT")}
    verdict = decide(info, interrupted, _cfg(5), 30)
    assert verdict.outcome == INTERRUPTED and "SIGINT on node 2 (c)" in verdict.detail
    lost = decide(info, {**ok, 1: None}, _cfg(5), 30)
    assert lost.outcome == FAILED and lost.root.rank == -1  # --nnodes 3: no restart with 2
    assert "stopped answering for 30 s" in lost.root.message and lost.root.host == "b"
    assert lost.detail == "lost node 1 (b): 2 nodes left, fewer than the 3 that --nnodes 3 needs"
    assert "the launcher of node 1 on b: its accordrun (pid 11)" in lost.root.summary()


def test_elastic_verdicts_restart_with_the_nodes_left_and_those_waiting():
    info = _info()
    worker = _failure(0, time.time() - 100)  # failed before the node was lost: still second
    statuses = {0: NodeStatus(0, "a", FAILED, [worker]), 1: None, 2: NodeStatus(2, "c", STOPPED)}
    verdict = decide(info, statuses, _cfg(5, (2, 4)), 5, waiting=1)
    assert verdict.outcome == RESTART and verdict.root.rank == -1 and verdict.others == [worker]
    assert (verdict.nnodes, verdict.survivors) == (3, 2)
    assert decide(info, statuses, _cfg(5, (2, 2)), 5, waiting=1).nnodes == 2  # MAX caps it
    assert decide(_info(restart=5), statuses, _cfg(5, (2, 4)), 5).outcome == FAILED
    # nodes waiting to join (no failure): a restart too, with them, counted as one
    resize = {0: NodeStatus(0, "a", RESIZE), 1: NodeStatus(1, "b", STOPPED),
              2: NodeStatus(2, "c", SUCCEEDED)}
    verdict = decide(info, resize, _cfg(1, (1, 4)), 5, waiting=1)
    assert verdict.outcome == RESTART and verdict.root is None
    assert (verdict.nnodes, verdict.survivors, verdict.detail) == (4, 3, "1 node waiting to join")
    assert Verdict.decode(verdict.encode()) == verdict


def test_liveness_needs_our_own_heartbeat_to_move_before_calling_a_node_lost():
    now = [0.0]
    store = HashStore()
    live = Liveness(store, "me", lost_after=5, clock=lambda: now[0])
    for agent in ("me", "b", "c"):
        store.add(heartbeat_key(agent), 1)

    def tick(seconds: float, beating: tuple[str, ...]) -> None:
        for _ in range(int(seconds / live.every)):
            now[0] += live.every
            for agent in beating:
                store.add(heartbeat_key(agent), 1)
            live.observe(["b", "c"])

    tick(2, ("me", "b", "c"))
    assert live.proven("b") and not live.lost("b")
    tick(6, ())  # the store (or this launcher) stalled: nobody's counter moved, nobody is lost
    assert not live.lost("b") and not live.lost("c")
    tick(3, ("me", "c"))  # b is silent while we beat: 3 s of ours is not yet 80 % of 5 s
    assert not live.lost("b")
    tick(1.5, ("me", "c"))
    assert live.lost("b") and not live.proven("b") and not live.lost("c")
    assert live.silence("b") >= 5


def test_error_file_formats_and_failure_messages(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"message": {"message": "ValueError: x", "extraInfo": {
        "py_callstack": "Traceback …\nValueError: x\n", "timestamp": "1"}}}))
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"message": "RuntimeError: y", "timestamp": "2"}))
    assert read_error_file(str(old)) == ("ValueError: x", "Traceback …\nValueError: x\n")
    assert read_error_file(str(new)) == ("RuntimeError: y", "RuntimeError: y")
    assert read_error_file(str(tmp_path / "none.json")) == (None, None)
    killed = make_failure(2, 0, 1, "h", 77, -15, time.time(), str(tmp_path / "none.json"))
    assert killed.message == "Signal 15 (SIGTERM) received by PID 77"
    assert killed.error_file is None and killed.signal_name() == "SIGTERM"
    raised = make_failure(2, 0, 1, "h", 77, 1, time.time(), str(old))
    assert raised.traceback.startswith("Traceback") and raised.error_file == str(old)
    assert "was killed by SIGTERM" in killed.summary()


def test_report_layout():
    root, other = _failure(3, time.time(), -9, node=1), _failure(0, time.time() + 1)
    text = format_report("train.py", root, [other], "footer line")
    assert "train.py FAILED" in text and "footer line" in text
    head, tail = text.split("Root Cause (first observed failure):")
    assert "error     : boom 0" in head and "rank      : 3 (local_rank: 1)" in tail
    assert "exitcode  : -9 (pid: 103) (SIGKILL)" in tail and "traceback : tb" in tail


def test_local_addresses():
    assert is_local_address("127.0.0.1") and is_local_address("localhost")
    assert not is_local_address("192.0.2.1")  # TEST-NET-1: never ours


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, first package name under accord) of every accord import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("accord."):
            found.append((node.lineno, node.module.split(".")[1]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names
                      if a.name.startswith("accord.")]
    return found


def test_the_launcher_never_imports_groups_collectives_transports_or_the_api():
    bad = [f"{path.name}:{line} imports accord.{name}" for path in LAUNCHER.glob("*.py")
           for line, name in _imports(path) if name in FORBIDDEN]
    assert not bad, "the launcher may use rendezvous, store and the foundation only:\n" + \
        "\n".join(bad)


@pytest.mark.parametrize("name", ["worker.py", "reaper.py"])
def test_the_bootstraps_use_the_standard_library_only(name):
    tree = ast.parse((LAUNCHER / name).read_text(encoding="utf-8"))
    relative = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    named = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
             if a.name.split(".")[0] in ("accord", "numpy")]
    assert not relative and not named, f"{name} runs by path before accord is importable"
