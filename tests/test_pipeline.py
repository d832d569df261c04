"""The API's call pipeline (api/pipeline.py): every entry point takes the same steps, written
once — the group, the ranks, the DETAIL check, the short or general path, and counting a
call this rank left by an exception."""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest

import accord as dist
from accord.diagnostics import debug
from tests.harness import run_ranks

API = pathlib.Path(dist.__file__).parent / "api"


def test_the_steps_are_written_in_the_pipeline_only():
    for name in ("collectives.py", "objects.py", "p2p.py"):
        text = (API / name).read_text(encoding="utf-8")
        for step in ("calls_raised", "DETAIL_ON", "device_groups and", "except BaseException"):
            assert step not in text, f"api/{name} takes a step of the pipeline itself: {step!r}"


def _bad_calls(rank: int) -> dict[str, object]:
    """One call per entry point that this rank leaves by an argument error before sending."""
    x, other = np.ones(2), 1 - rank
    return {
        "all_reduce": lambda: dist.all_reduce("not a tensor"),
        "broadcast": lambda: dist.broadcast(x, src=99),
        "barrier": lambda: dist.barrier(timeout="soon"),
        "reduce": lambda: dist.reduce(x, dst=-1),
        "all_gather": lambda: dist.all_gather([x], x),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(np.ones(3), x),
        "gather": lambda: dist.gather(x, dst=99),
        "scatter": lambda: dist.scatter(x, src=99),
        "reduce_scatter": lambda: dist.reduce_scatter(x, [x]),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x, np.ones(3)),
        "all_to_all": lambda: dist.all_to_all([x], [x]),
        "all_to_all_single": lambda: dist.all_to_all_single(x, x, [5, 5], [1, 1]),
        "monitored_barrier": lambda: dist.monitored_barrier(timeout="soon"),
        "broadcast_object_list": lambda: dist.broadcast_object_list([1], src=99),
        "all_gather_object": lambda: dist.all_gather_object("not a list", 1),
        "gather_object": lambda: dist.gather_object(1, dst=99),
        "scatter_object_list": lambda: dist.scatter_object_list([None], src=99),
        "isend": lambda: dist.isend(x, dst=99),
        "irecv": lambda: dist.irecv(x, src=99),
        "send": lambda: dist.send(x, group_dst=7),
        "recv": lambda: dist.recv("not a tensor", src=other),
        "send_object_list": lambda: dist.send_object_list([1], dst=rank),
        "recv_object_list": lambda: dist.recv_object_list([None], src=rank),
    }


def test_every_entry_point_counts_a_call_it_left_by_an_exception():
    def body(rank):
        pg = dist.group.WORLD
        missed = []
        for name, call in _bad_calls(rank).items():
            before = pg.calls_raised
            with pytest.raises((ValueError, TypeError)):
                call()
            if pg.calls_raised != before + 1:
                missed.append(name)
        x = np.full(2, rank + 1.0)
        dist.all_reduce(x)  # nothing was sent: the group still works
        return missed, x.tolist()

    assert run_ranks(2, body) == [([], [3.0, 3.0])] * 2


def test_a_non_member_is_warned_at_its_own_line_and_gets_torchs_value():
    def body(rank):
        group = dist.new_group([0])
        if rank == 0:
            return None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [dist.all_reduce(np.ones(1), group=group), dist.broadcast(np.ones(1), 0, group=group),
                   dist.recv(np.ones(1), group=group), dist.recv_object_list([None], group=group),
                   dist.gather_object(1, group=group)]
        return got, sorted({w.filename for w in caught}), len(caught)

    assert run_ranks(2, body)[1] == ([None, None, -1, -1, None], [__file__], 5)


def test_an_explicit_group_after_destroy_says_so():
    def body(rank):
        group = dist.new_group([0, 1])
        dist.destroy_process_group(group)
        with pytest.raises(dist.DestroyedGroupError, match="destroyed"):
            dist.all_reduce(np.ones(1), group=group)
        return True

    assert run_ranks(2, body) == [True, True]


@pytest.fixture
def detail_level():
    before = debug.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    yield
    dist.set_debug_level(before)


def test_detail_checks_object_lists_by_length_and_roots(detail_level):
    def body(rank):
        seen = []
        for call in (lambda: dist.broadcast_object_list([None] * (1 + rank)),
                     lambda: dist.gather_object(rank, [None, None] if rank == 0 else None, dst=rank)):
            with pytest.raises(dist.CollectiveMismatchError) as info:
                call()
            seen.append(str(info.value))
        objects = [None, None]
        dist.all_gather_object(objects, rank)  # nothing was sent: the group still works
        return seen, objects

    for (lengths, roots), objects in run_ranks(2, body):
        assert "object_list: a list of 1 on rank 0; a list of 2 on rank 1" in lengths
        assert "the root: 0 on rank 0; 1 on rank 1" in roots
        assert objects == [0, 1]
