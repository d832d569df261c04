"""shrink_group's arguments and refusals, with torch's errors (ranks as threads over the
loopback transport; the survivors' side with real processes is processes/test_shrink.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import accord
from accord import SHRINK_ABORT, SHRINK_DEFAULT
from harness import run_ranks


def _refusals(rank: int) -> dict[str, tuple[str, str]]:
    """What each bad call raises on ``rank`` of a world of 2 (nothing is sent: the world
    stays usable, which the final all_reduce shows)."""
    got = {}
    cases = {
        "not a list": lambda: accord.shrink_group((1,)),
        "empty": lambda: accord.shrink_group([]),
        "bad flag": lambda: accord.shrink_group([1 - rank], shrink_flags=7),
        "not an int": lambda: accord.shrink_group(["1"]),
        "out of range": lambda: accord.shrink_group([2]),
        "duplicate": lambda: accord.shrink_group([1 - rank, 1 - rank]),
        "everyone": lambda: accord.shrink_group([0, 1]),
        "itself": lambda: accord.shrink_group([rank]),
        "not a member": lambda: accord.shrink_group([0], group=accord.GroupMember.NON_GROUP_MEMBER),
        "a group of one": lambda: accord.shrink_group([0], group=accord.new_group([rank])),
    }
    for name, call in cases.items():
        if name == "a group of one":
            accord.new_group([1 - rank])  # (every rank makes both groups of one, in order)
        try:
            call()
            got[name] = ("returned", "")
        except Exception as exc:  # noqa: BLE001 — compared by the test
            got[name] = (type(exc).__name__, str(exc))
    x = np.ones(2)
    accord.all_reduce(x)
    got["still works"] = ("ok", str(x[0]))
    return got


def test_bad_arguments_get_torchs_errors_and_send_nothing() -> None:
    for rank, got in enumerate(run_ranks(2, _refusals)):
        assert got["not a list"][0] == "TypeError" and "must be a list" in got["not a list"][1]
        assert got["empty"][0] == "ValueError" and "cannot be empty" in got["empty"][1]
        assert got["bad flag"][0] == "ValueError" and "SHRINK_ABORT" in got["bad flag"][1]
        assert got["not an int"][0] == "TypeError" and "must be integers" in got["not an int"][1]
        assert got["out of range"][0] == "ValueError" and "out of bounds" in got["out of range"][1]
        assert got["duplicate"][0] == "ValueError" and "Duplicate rank" in got["duplicate"][1]
        assert got["everyone"][0] == "ValueError" and "Cannot exclude all 2" in got["everyone"][1]
        assert got["itself"][0] == "RuntimeError" and f"Current rank {rank}" in got["itself"][1]
        assert got["not a member"][0] == "RuntimeError", got["not a member"]
        assert got["a group of one"][0] == "ValueError" and "size 1" in got["a group of one"][1]
        assert got["still works"] == ("ok", "2.0")


def _in_flight(rank: int, rank_0_done: threading.Event) -> dict[str, str]:
    """Rank 0 starts an async all_reduce that rank 1 never joins (rank 1 waits, its world
    open, until rank 0 is done): SHRINK_DEFAULT refuses to shrink under it; SHRINK_ABORT
    fails it and shrinks (to a world of rank 0 alone)."""
    got: dict[str, str] = {}
    if rank == 1:
        rank_0_done.wait(20)
        return got
    work = accord.all_reduce(np.ones(2), async_op=True)
    try:
        accord.shrink_group([1], shrink_flags=SHRINK_DEFAULT)
    except RuntimeError as exc:
        got["default"] = str(exc)
    accord.shrink_group([1], shrink_flags=SHRINK_ABORT)
    try:
        work.wait()
    except Exception as exc:  # noqa: BLE001 — compared by the test
        got["aborted"] = type(exc).__name__
    x = np.full(3, 5.0)
    accord.all_reduce(x)  # the new world: rank 0 alone
    got["after"] = f"{accord.get_rank()}/{accord.get_world_size()}/{x[0]}"
    accord.destroy_process_group()
    rank_0_done.set()
    return got


@pytest.mark.filterwarnings("ignore::accord.InsecureListenWarning")  # (the new world listens)
def test_calls_in_flight_refuse_the_default_flag_and_abort_with_the_abort_flag() -> None:
    done = threading.Event()
    got = run_ranks(2, lambda rank: _in_flight(rank, done))[0]
    assert "has calls in flight" in got["default"] and "SHRINK_ABORT" in got["default"], got
    assert got["aborted"] in ("PeerError", "DestroyedGroupError"), got
    assert got["after"] == "0/1/5.0", got


def test_a_world_of_one_cannot_shrink() -> None:
    accord.init_process_group("accord", store=accord.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="size 1"):
            accord.shrink_group([0])
    finally:
        accord.destroy_process_group()


def _grow_alone(rank: int) -> dict[str, tuple[str, str]]:
    got = {}
    for name, call in {
        "not larger": lambda: accord.grow_group(2),
        "not an int": lambda: accord.grow_group(3.0),
        "nobody asks": lambda: accord.grow_group(3, timeout=0.5),
    }.items():
        try:
            call()
            got[name] = ("returned", "")
        except Exception as exc:  # noqa: BLE001 — compared by the test
            got[name] = (type(exc).__name__, str(exc))
    return got


def test_grow_group_checks_its_size_and_says_how_many_newcomers_came() -> None:
    got = run_ranks(2, _grow_alone, expect_failure=True)
    for report in got:
        assert report["not larger"][0] == "ValueError" and report["not an int"][0] == "ValueError"
    assert got[0]["nobody asks"][0] == "DistTimeoutError", got[0]
    assert "0 of the 1 newcomer(s)" in got[0]["nobody asks"][1], got[0]
    assert got[1]["nobody asks"][0] == "DistTimeoutError", got[1]  # waited for rank 0's word


def test_a_newcomer_nobody_admits_times_out_saying_why() -> None:
    store = accord.HashStore()
    with pytest.raises(accord.DistTimeoutError, match="not admitted within .*grow_group"):
        accord.join_process_group(store=store, timeout=0.3)
    assert not accord.is_initialized()
    with pytest.raises(ValueError, match="TCPStore"):
        accord.join_process_group(init_method="file:///tmp/nowhere", timeout=0.3)


def _one_moves_on(rank: int, moved: threading.Event) -> str:
    """Rank 0 leaves for the job's next world (as shrink_group's fastest survivor does);
    rank 1's next call says so, rather than calling it a rank that left the job."""
    from accord.world import current_world

    if rank == 0:
        world = current_world()
        assert world is not None
        world.destroy(moving=True)
        moved.set()
        return ""
    moved.wait(10)
    try:
        accord.all_reduce(np.ones(2))
    except accord.PeerError as exc:
        return f"{exc} | lost={accord.lost_ranks()}"
    return "no error"


def test_a_survivor_that_moves_on_is_not_counted_lost() -> None:
    moved = threading.Event()
    got = run_ranks(2, lambda rank: _one_moves_on(rank, moved))[1]
    assert "rank 0 moved on to the job's next world" in got, got
    assert got.endswith("lost=[]"), got  # (a moving rank is not among the lost)
