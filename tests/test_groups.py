"""Subgroups: membership, rank translation, non-members, concurrent groups without cross-talk."""

from __future__ import annotations

import contextvars
import threading
import warnings

import numpy as np
import pytest

import accord as dist
from harness import run_ranks


def test_world_queries():
    def body(rank):
        return (dist.get_rank(), dist.get_world_size(), dist.is_initialized(),
                dist.get_backend(), dist.get_process_group_ranks(dist.group.WORLD),
                dist.GroupMember.WORLD is dist.group.WORLD, dist.get_pg_count())

    results = run_ranks(3, body)
    assert [r[:2] for r in results] == [(0, 3), (1, 3), (2, 3)]
    assert all(r[2:] == (True, "accord", [0, 1, 2], True, 1) for r in results)


def test_new_group_members_and_rank_translation():
    def body(rank):
        group = dist.new_group([3, 1])  # sorted, as torch does by default
        if rank not in (1, 3):
            assert group is dist.GroupMember.NON_GROUP_MEMBER
            return dist.get_rank(group), dist.get_world_size(group)
        return (dist.get_rank(group), dist.get_world_size(group), dist.get_process_group_ranks(group),
                dist.get_group_rank(group, 3), dist.get_global_rank(group, 0))

    results = run_ranks(4, body)
    assert results[0] == results[2] == (-1, -1)
    assert results[1] == (0, 2, [1, 3], 1, 1)
    assert results[3] == (1, 2, [1, 3], 1, 1)


def test_non_member_collectives_return_none_with_a_warning():
    def body(rank):
        group = dist.new_group([0])
        if rank == 1:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert dist.all_reduce(np.ones(1), group=group) is None
                assert dist.recv(np.ones(1), group=group) == -1
            return "does not belong" in str(caught[0].message)
        x = np.ones(1)
        dist.all_reduce(x, group=group)
        return float(x[0])

    assert run_ranks(2, body) == [1.0, True]


def test_group_rank_errors():
    def body(rank):
        group = dist.new_group([0, 1])
        if rank == 2:
            return None
        with pytest.raises(ValueError, match="not a member"):
            dist.get_group_rank(group, 2)
        with pytest.raises(ValueError, match="out of range"):
            dist.get_global_rank(group, 5)
        with pytest.raises(ValueError):
            dist.broadcast(np.zeros(1), src=2, group=group)  # global rank 2 is not in the group
        return True

    assert run_ranks(3, body)[:2] == [True, True]


@pytest.mark.parametrize("ranks,problem", [([0, 0], "duplicates"), ([0, 7], "out of range"),
                                           ([], "at least one"), ("ab", "list of ints")])
def test_new_group_rejects_bad_rank_lists(ranks, problem):
    def body(rank):
        with pytest.raises((ValueError, TypeError), match=problem):
            dist.new_group(ranks)
        return True

    assert run_ranks(2, body) == [True, True]


def test_disjoint_groups_run_concurrently_without_cross_talk():
    def body(rank):
        low, high = dist.new_group([0, 1]), dist.new_group([2, 3])
        mine = low if rank < 2 else high
        results = []
        for i in range(20):
            x = np.full(4, rank + i, dtype=np.int64)
            dist.all_reduce(x, group=mine)
            results.append(int(x[0]))
        return results

    results = run_ranks(4, body)
    assert results[0] == results[1] == [1 + 2 * i for i in range(20)]
    assert results[2] == results[3] == [5 + 2 * i for i in range(20)]


def test_overlapping_groups_used_from_two_threads_at_once():
    def body(rank):
        world = dist.group.WORLD
        evens = dist.new_group([0, 2])
        out: dict[str, list[int]] = {"world": [], "evens": []}

        def on_world():
            for i in range(30):
                x = np.array([rank + i])
                dist.all_reduce(x, group=world)
                out["world"].append(int(x[0]))

        def on_evens():
            for i in range(30):
                x = np.array([rank * 10 + i])
                dist.all_reduce(x, group=evens)
                out["evens"].append(int(x[0]))

        # threads start with an empty context: carry this rank's world scope into them
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(on_world,))]
        if rank in (0, 2):
            threads.append(threading.Thread(target=contextvars.copy_context().run, args=(on_evens,)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        return out

    results = run_ranks(3, body)
    for out in results:
        assert out["world"] == [3 + 3 * i for i in range(30)]
    assert results[0]["evens"] == results[2]["evens"] == [20 + 2 * i for i in range(30)]


def test_use_local_synchronization_lets_only_members_call_new_group():
    def body(rank):
        if rank == 2:
            return None
        group = dist.new_group([0, 1], use_local_synchronization=True)
        x = np.ones(1)
        dist.all_reduce(x, group=group)
        return float(x[0])

    assert run_ranks(3, body) == [2.0, 2.0, None]


def test_destroying_a_subgroup_leaves_the_world_working():
    def body(rank):
        group = dist.new_group([0, 1])
        dist.destroy_process_group(group)
        x = np.ones(1)
        dist.all_reduce(x)
        return float(x[0]), dist.get_pg_count()

    assert run_ranks(2, body) == [(2.0, 2)] * 2  # torch counts groups made, not groups alive
