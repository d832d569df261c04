"""The TCPStore server's logic without sockets: parking, waking, timeouts, order, workers."""

from __future__ import annotations

from accord.store import tcp_protocol as p
from accord.store.tcp_engine import StoreEngine

A, B, C = "conn-a", "conn-b", "conn-c"


def _engine(*conns: str) -> StoreEngine:
    engine = StoreEngine()
    for conn in conns:
        assert engine.submit(conn, p.Hello(p.VERSION, True), 0.0) == [(conn, p.OkResponse())]
    return engine


def test_get_parks_until_set() -> None:
    engine = _engine(A, B)
    assert engine.submit(A, p.GetRequest("k", 5.0), 0.0) == []
    assert engine.num_parked == 1
    assert engine.next_deadline() == 5.0
    replies = engine.submit(B, p.SetRequest("k", b"v"), 1.0)
    assert replies == [(B, p.OkResponse()), (A, p.ValueResponse(b"v"))]
    assert engine.num_parked == 0
    assert engine.next_deadline() is None


def test_parked_get_times_out_naming_the_key() -> None:
    engine = _engine(A)
    engine.submit(A, p.GetRequest("k", 2.0), 10.0)
    assert engine.expire(11.9) == []
    assert engine.expire(12.0) == [(A, p.TimeoutResponse(("k",)))]
    assert engine.num_parked == 0


def test_zero_timeout_checks_once() -> None:
    engine = _engine(A)
    assert engine.submit(A, p.WaitRequest(("x",), 0.0), 0.0) == [(A, p.TimeoutResponse(("x",)))]


def test_requests_behind_a_parked_one_wait_their_turn() -> None:
    engine = _engine(A, B)
    engine.submit(A, p.WaitRequest(("x", "y"), 9.0), 0.0)
    assert engine.submit(A, p.NumKeysRequest(), 0.0) == []
    assert engine.submit(B, p.SetRequest("x", b"1"), 0.0) == [(B, p.OkResponse())]
    replies = engine.submit(B, p.SetRequest("y", b"2"), 0.0)
    assert replies == [(B, p.OkResponse()), (A, p.OkResponse()), (A, p.IntResponse(2))]


def test_wait_timeout_names_only_missing_keys() -> None:
    engine = _engine(A, B)
    engine.submit(A, p.MultiGetRequest(("x", "y"), 1.0), 0.0)
    engine.submit(B, p.SetRequest("x", b"1"), 0.5)
    assert engine.expire(1.0) == [(A, p.TimeoutResponse(("y",)))]


def test_blocking_pops_are_first_come_first_served() -> None:
    engine = _engine(A, B, C)
    engine.submit(A, p.QueuePopRequest("q", True, 9.0), 0.0)
    engine.submit(B, p.QueuePopRequest("q", True, 9.0), 0.0)
    replies = engine.submit(C, p.QueuePushRequest("q", b"1"), 0.0)
    assert replies == [(C, p.OkResponse()), (A, p.ValueResponse(b"1"))]
    replies = engine.submit(C, p.QueuePushRequest("q", b"2"), 0.0)
    assert replies == [(C, p.OkResponse()), (B, p.ValueResponse(b"2"))]
    assert engine.table.queue_len("q") == 0


def test_nonblocking_pop_on_empty_is_an_error() -> None:
    engine = _engine(A)
    [(conn, reply)] = engine.submit(A, p.QueuePopRequest("q", False, 0.0), 0.0)
    assert isinstance(reply, p.ErrorResponse) and reply.code == p.ERR_QUEUE_EMPTY


def test_add_on_non_integer_is_a_store_error() -> None:
    engine = _engine(A)
    engine.submit(A, p.SetRequest("w", b"word"), 0.0)
    [(conn, reply)] = engine.submit(A, p.AddRequest("w", 1), 0.0)
    assert isinstance(reply, p.ErrorResponse) and reply.code == p.ERR_STORE and "w" in reply.message


def test_disconnect_forgets_parked_and_queued_requests() -> None:
    engine = _engine(A, B)
    engine.submit(A, p.QueuePopRequest("q", True, 9.0), 0.0)
    engine.submit(A, p.NumKeysRequest(), 0.0)
    engine.disconnect(A)
    assert engine.num_parked == 0
    assert engine.next_deadline() is None
    assert engine.submit(B, p.QueuePushRequest("q", b"kept"), 0.0) == [(B, p.OkResponse())]
    assert engine.table.queue_len("q") == 1


def test_wait_workers_counts_worker_hellos_only() -> None:
    engine = _engine(A)
    assert engine.submit(A, p.WaitWorkersRequest(2, 5.0), 0.0) == []
    assert engine.submit(B, p.Hello(p.VERSION, False), 0.0) == [(B, p.OkResponse())]
    replies = engine.submit(C, p.Hello(p.VERSION, True), 1.0)
    assert replies == [(C, p.OkResponse()), (A, p.IntResponse(2))]


def test_wait_workers_timeout_reports_how_many_joined() -> None:
    engine = _engine(A)
    engine.submit(A, p.WaitWorkersRequest(3, 5.0), 0.0)
    assert engine.expire(5.0) == [(A, p.IntResponse(1))]


def test_one_set_releases_many_waiters() -> None:
    conns = [f"c{i}" for i in range(50)]
    engine = _engine(*conns, A)
    for conn in conns:
        engine.submit(conn, p.GetRequest("go", 9.0), 0.0)
    replies = engine.submit(A, p.SetRequest("go", b"1"), 0.0)
    assert sorted(c for c, _ in replies[1:]) == sorted(conns)
    assert engine.num_parked == 0


def test_released_request_can_wake_another() -> None:
    engine = _engine(A, B, C)
    engine.submit(A, p.GetRequest("first", 9.0), 0.0)
    engine.submit(A, p.SetRequest("second", b"from A"), 0.0)  # queued behind A's get
    engine.submit(B, p.GetRequest("second", 9.0), 0.0)
    replies = engine.submit(C, p.SetRequest("first", b"1"), 0.0)
    assert (B, p.ValueResponse(b"from A")) in replies
    assert engine.num_parked == 0
