"""accord bench --tp's communication time: the union of the communication events (issue, wait,
backend), cut to each token, so nested and overlapping events count once."""

from __future__ import annotations

from accord.bench import tp_profile
from accord.bench.tp_profile import TOKEN_EVENT, kind, token_comm, union_within


def test_kinds() -> None:
    assert kind("_c10d_functional::wait_tensor") == "wait"
    assert kind("_c10d_functional::all_reduce") == "issue"
    assert kind("c10d::allreduce_") == "issue"
    assert kind("accord:all_reduce") == kind("gloo:all_gather") == "backend"
    assert kind("_c10d_functional::_wrap_tensor_autograd") is None
    assert kind("Redistribute") is None and kind("aten::mm") is None


def test_union_counts_overlaps_once_and_cuts_to_the_span() -> None:
    assert union_within([(0, 10), (5, 15), (20, 30)], (0, 100)) == 25
    assert union_within([(2, 3), (0, 10)], (0, 100)) == 10  # nested
    assert union_within([(-5, 5), (95, 200)], (0, 100)) == 10  # cut
    assert union_within([], (0, 1)) == 0


def test_token_comm_on_a_synthetic_profile() -> None:
    events = [
        (TOKEN_EVENT, 0, 100), (TOKEN_EVENT, 100, 300),
        # token 1: issue 10–20, the backend's async event 10–40 on another thread, wait 30–40
        ("_c10d_functional::all_reduce", 10, 20), ("accord:all_reduce", 10, 40),
        ("_c10d_functional::wait_tensor", 30, 40), ("aten::mm", 40, 90),
        # token 2: issue 150–160, wait 160–200; a gloo event inside the wait
        ("_c10d_functional::all_reduce", 150, 160), ("_c10d_functional::wait_tensor", 160, 200),
        ("gloo:all_reduce", 170, 195),
        ("_c10d_functional::all_reduce", 400, 500),  # after the tokens: not counted
    ]
    comm = token_comm(events)
    assert comm.tokens == 2 and comm.token_us == 150
    assert comm.comm_us == (30 + 50) / 2
    assert comm.issue_us == (10 + 10) / 2 and comm.wait_us == (10 + 40) / 2
    assert comm.backend_us == (30 + 25) / 2
    assert comm.counts == {"_c10d_functional::all_reduce": 1, "_c10d_functional::wait_tensor": 1,
                           "accord:all_reduce": 0.5, "gloo:all_reduce": 0.5}
    assert abs(comm.share - 80 / 300) < 1e-12
    assert tp_profile.token_comm([]).share == 0


def test_spans_pair_each_issue_with_its_wait() -> None:
    events = [(TOKEN_EVENT, 0, 100), ("_c10d_functional::all_reduce", 10, 20),
              ("c10d::allreduce_", 11, 19), ("_c10d_functional::wait_tensor", 30, 40),
              ("_c10d_functional::_wrap_tensor_autograd", 25, 45),
              ("_c10d_functional::all_gather_into_tensor", 50, 55),
              ("_c10d_functional::wait_tensor", 56, 70),
              ("_c10d_functional::all_reduce", 150, 160)]  # outside the token
    assert tp_profile.spans(events) == [(10, 40), (50, 70)]
    overlapped = events[:2] + [("_c10d_functional::all_reduce", 15, 18),
                               ("_c10d_functional::wait_tensor", 30, 40),
                               ("_c10d_functional::wait_tensor", 41, 42)]
    assert tp_profile.spans(overlapped) == []


def test_skew_is_the_time_before_the_last_rank_issued() -> None:
    from types import SimpleNamespace

    from accord.bench.tp_report import skew

    def rank(spans):
        return SimpleNamespace(spans=spans, comm={"tokens": 2})

    # call 1: rank 1 issues 300 µs after rank 0; call 2: rank 0 is 100 µs late
    ranks = [rank([(0, 400), (1000, 1200)]), rank([(300, 400), (900, 1200)])]
    assert skew(ranks) == ((300 + 0) / 2 + (0 + 100) / 2) / 2 / 1e3
    assert skew(ranks[:1]) == 0.0
    assert skew([rank([(0, 1)]), rank([])]) != skew([rank([(0, 1)]), rank([])])  # nan
