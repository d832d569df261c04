"""The TCPStore server's logic without sockets: torch's semantics, parking, waking, refusals."""

from __future__ import annotations

import pytest

from accord.store import tcp_protocol as p
from accord.store.tcp_engine import Refused, StoreEngine

C = p.Command
A, B, D = "conn-a", "conn-b", "conn-d"
STOP, CANCELED = p.reply_u8(p.STOP_WAITING), p.reply_u8(p.WAIT_CANCELED)


def run(engine: StoreEngine, conn: str, command: p.Command, keys: tuple[str, ...] = (),
        values: tuple[bytes, ...] = (), number: int = 0) -> list:
    return engine.execute(conn, p.Request(command, keys, values, number))


def test_replies_and_their_absence() -> None:
    engine = StoreEngine()
    assert run(engine, A, C.VALIDATE, number=p.MAGIC) == []
    assert run(engine, A, C.PING, number=77) == [(A, p.reply_u32(77))]
    assert run(engine, A, C.SET, ("/k",), (b"v",)) == []  # SET has no reply
    assert run(engine, A, C.GET, ("/k",)) == [(A, p.string(b"v"))]
    assert run(engine, A, C.GET, ("/missing",)) == [(A, p.string(b""))]  # as torch's libuv
    assert run(engine, A, C.ADD, ("/n",), number=5) == [(A, p.reply_i64(5))]
    assert run(engine, A, C.GETNUMKEYS) == [(A, p.reply_i64(2))]
    assert run(engine, A, C.DELETE_KEY, ("/k",)) == [(A, p.reply_i64(1))]
    assert run(engine, A, C.DELETE_KEY, ("/k",)) == [(A, p.reply_i64(0))]
    assert run(engine, A, C.LIST_KEYS) == [(A, p.reply_key_list(["/n"]))]
    assert run(engine, A, C.CANCEL_WAIT) == [(A, CANCELED)]  # even with nothing parked


def test_compare_set_as_torch() -> None:
    engine = StoreEngine()
    assert run(engine, A, C.COMPARE_SET, ("/c",), (b"", b"new")) == [(A, p.string(b"new"))]
    assert run(engine, A, C.COMPARE_SET, ("/x",), (b"e", b"d")) == [(A, p.string(b"e"))]
    assert run(engine, A, C.COMPARE_SET, ("/c",), (b"zz", b"d")) == [(A, p.string(b"new"))]
    assert run(engine, A, C.COMPARE_SET, ("/c",), (b"new", b"d")) == [(A, p.string(b"d"))]
    assert "/x" not in engine.table.data


def test_wait_parks_until_every_key_is_set() -> None:
    engine = StoreEngine()
    run(engine, B, C.SET, ("/x",), (b"1",))
    assert run(engine, A, C.WAIT, ("/x", "/y", "/z")) == []
    assert engine.num_parked == 1
    assert run(engine, B, C.SET, ("/y",), (b"2",)) == []
    assert run(engine, B, C.MULTI_SET, ("/z", "/z"), (b"3", b"4")) == [(A, STOP)]
    assert engine.num_parked == 0
    assert run(engine, A, C.MULTI_GET, ("/x", "/z", "/nope")) == \
        [(A, p.reply_strings([b"1", b"4", b""]))]


def test_a_key_deleted_before_the_last_one_came_is_waited_for_again() -> None:
    engine = StoreEngine()
    run(engine, A, C.WAIT, ("/x", "/y"))
    run(engine, B, C.SET, ("/x",), (b"1",))
    run(engine, B, C.DELETE_KEY, ("/x",))
    assert run(engine, B, C.SET, ("/y",), (b"2",)) == []
    assert run(engine, B, C.APPEND, ("/x",), (b"again",)) == [(A, STOP)]


def test_cancel_wait_unparks() -> None:
    engine = StoreEngine()
    run(engine, A, C.WAIT, ("/x",))
    assert run(engine, A, C.CANCEL_WAIT) == [(A, CANCELED)]
    assert engine.num_parked == 0
    assert run(engine, B, C.SET, ("/x",), (b"1",)) == []  # nobody left to wake


def test_every_waiter_of_a_key_wakes_and_disconnect_forgets() -> None:
    engine = StoreEngine()
    conns = [f"c{i}" for i in range(50)]
    for conn in conns:
        run(engine, conn, C.WAIT, ("/go",))
    engine.disconnect("c7")
    replies = run(engine, A, C.ADD, ("/go",), number=1)
    assert replies[0] == (A, p.reply_i64(1))
    assert sorted(c for c, _ in replies[1:]) == sorted(set(conns) - {"c7"})


def test_queues_as_torch_libuv() -> None:
    engine = StoreEngine()
    assert run(engine, A, C.QUEUE_POP, ("/q",)) == [(A, p.reply_popped(None, 0))]
    assert run(engine, A, C.CHECK, ("/q",)) == [(A, p.reply_u8(p.NOT_READY))]
    run(engine, A, C.QUEUE_PUSH, ("/q",), (b"1",))
    run(engine, A, C.QUEUE_PUSH, ("/q",), (b"2",))
    assert run(engine, A, C.CHECK, ("/q",)) == [(A, p.reply_u8(p.READY))]  # queues count
    assert run(engine, A, C.QUEUE_LEN, ("/q",)) == [(A, p.reply_i64(2))]
    assert run(engine, A, C.GETNUMKEYS) == [(A, p.reply_i64(0))]  # but are not keys
    assert run(engine, A, C.QUEUE_POP, ("/q",)) == [(A, p.reply_popped(b"1", 2))]
    assert run(engine, A, C.QUEUE_POP, ("/q",)) == [(A, p.reply_popped(b"2", 1))]


def test_a_push_wakes_one_waiter_first_come_first_served() -> None:
    engine = StoreEngine()
    run(engine, A, C.WAIT, ("/q",))
    run(engine, B, C.WAIT, ("/q",))
    assert run(engine, D, C.QUEUE_PUSH, ("/q",), (b"1",)) == [(A, STOP)]
    assert run(engine, D, C.QUEUE_PUSH, ("/q",), (b"2",)) == [(B, STOP)]


def test_barrier_releases_everyone_at_world_size() -> None:
    engine = StoreEngine()
    assert run(engine, A, C.BARRIER, ("/b",), number=3) == []
    assert run(engine, B, C.BARRIER, ("/b",), number=3) == []
    replies = run(engine, D, C.BARRIER, ("/b",), number=3)
    assert sorted(replies) == sorted([(A, STOP), (B, STOP), (D, STOP)])
    assert engine.table.data["/b"] == b"3"


@pytest.mark.parametrize("requests, message", [
    ([(C.SET, ("/w",), (b"word",), 0), (C.ADD, ("/w",), (), 1)], "not an integer"),
    ([(C.ADD, ("/n",), (), (1 << 63) - 1), (C.ADD, ("/n",), (), 1)], "beyond 64 bits"),
    ([(C.SET, ("/b",), (b"x",), 0), (C.BARRIER, ("/b",), (), 2)], "not an integer"),
    ([(C.WAIT, ("/x",), (), 0), (C.WAIT, ("/y",), (), 0)], "still waiting"),
], ids=["add-word", "add-overflow", "barrier-word", "second-wait"])
def test_refused_requests_change_nothing(requests: list, message: str) -> None:
    engine = StoreEngine()
    *before, last = requests
    for command, keys, values, number in before:
        run(engine, A, command, keys, values, number)
    data = dict(engine.table.data)
    with pytest.raises(Refused, match=message):
        run(engine, A, *last)
    assert engine.table.data == data
