"""TCPStore server and client over real sockets: scale, misbehaving clients, startup, tenancy.

Raw sockets here speak torch's protocol by hand (tcp_protocol's encoders); torch's own
clients and servers are in test_torch_interop.py.
"""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Iterator

import pytest

from accord.errors import DistStoreError, StoreTimeoutError
from accord.store import TCPStore, tcp_client, tcp_servers, tcp_store
from accord.store import tcp_protocol as p

HOST = "127.0.0.1"
TIMEOUT = timedelta(seconds=10)


@pytest.fixture
def master() -> Iterator[TCPStore]:
    store = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    yield store
    store.close()


def _raw(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=10)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    sock.close()
    return data


C = p.Command
HELLO = p.request(C.VALIDATE, number=p.MAGIC) + p.request(C.PING, number=5)
OK = p.reply_u32(5)


# -- scale -------------------------------------------------------------------------------------
def test_300_concurrent_clients(master: TCPStore) -> None:
    clients = 300

    def client(_: int) -> bytes:
        with TCPStore(HOST, master.port, timeout=TIMEOUT) as store:
            if store.add("arrived", 1) == clients:
                store.set("go", "all here")
            return store.get("go")  # parked on the server until the last client arrives

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    assert results == [b"all here"] * clients
    assert master.add("arrived", 0) == clients


def test_large_values_cross_intact(master: TCPStore) -> None:
    value = bytes(range(256)) * (32 * 1024)  # 8 MiB
    with TCPStore(HOST, master.port, timeout=TIMEOUT) as client:
        client.set("big", value)
        assert master.get("big") == value
        assert client.multi_get(["big", "big"]) == [value, value]


# -- misbehaving clients -----------------------------------------------------------------------
def _garbage(port: int) -> bytes:
    sock = _raw(port)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    return _read_until_closed(sock)


def _truncated(port: int) -> bytes:
    sock = _raw(port)
    sock.sendall(HELLO + p.request(C.SET, keys=[b"/k"], values=[b"value"])[:11])
    sock.shutdown(socket.SHUT_WR)
    return _read_until_closed(sock)


def _oversized(port: int) -> bytes:
    sock = _raw(port)
    sock.sendall(HELLO)
    answer = sock.recv(len(OK), socket.MSG_WAITALL)
    sock.sendall(b"\x01" + p.string(b"/k") + (p.MAX_VALUE_BYTES + 1).to_bytes(8, "little"))
    return answer + _read_until_closed(sock)


def _unknown_command(port: int) -> bytes:
    sock = _raw(port)
    sock.sendall(HELLO + b"\x42")
    return _read_until_closed(sock)


def _no_validate(port: int) -> bytes:
    sock = _raw(port)
    sock.sendall(p.request(C.PING, number=5))
    return _read_until_closed(sock)


def _old_accord(port: int) -> bytes:
    sock = _raw(port)
    sock.sendall(b"AS\x01\x01\x00\x00\x00\x09" + bytes(9))
    return _read_until_closed(sock)


@pytest.mark.parametrize("misbehave, answered, logged", [
    (_garbage, b"", "did not start with VALIDATE"), (_truncated, OK, "inside a request"),
    (_oversized, OK, "value of 8388609 bytes is above the limit"),
    (_unknown_command, OK, "unknown command 66"), (_no_validate, b"", "did not start"),
    (_old_accord, b"", "accord's own store protocol"),
], ids=["garbage", "truncated", "oversized", "unknown", "no-validate", "old-accord"])
def test_bad_client_is_dropped_and_nobody_notices(master: TCPStore, misbehave, answered: bytes,
                                                  logged: str, caplog) -> None:
    with TCPStore(HOST, master.port, timeout=TIMEOUT) as good, good.clone() as waiting, \
            ThreadPoolExecutor(1) as pool:
        parked = pool.submit(waiting.get, "after")
        assert misbehave(master.port) == answered  # the server closed the bad connection
        good.set("after", "still fine")
        assert parked.result(timeout=10) == b"still fine"
        assert good.num_keys() == 1
    assert "closed the connection of client 127.0.0.1:" in caplog.text and logged in caplog.text


def test_a_parked_wait_ends_with_cancel_wait(master: TCPStore) -> None:
    sock = _raw(master.port)
    sock.sendall(HELLO + p.request(C.WAIT, keys=[b"/nobody-sets-this"]))
    assert sock.recv(len(OK), socket.MSG_WAITALL) == OK
    sock.sendall(p.request(C.CANCEL_WAIT))
    assert sock.recv(1) == p.reply_u8(p.WAIT_CANCELED)
    master.set("nobody-sets-this", "late")  # no STOP_WAITING follows: the wait is gone
    assert master.check(["nobody-sets-this"])  # (a reply on master's connection: set is done)
    sock.sendall(p.request(C.GET, keys=[b"/nobody-sets-this"]))
    assert sock.recv(12, socket.MSG_WAITALL) == p.string(b"late")
    sock.close()


def test_client_timeout_error_names_the_key(master: TCPStore) -> None:
    master.set_timeout(timedelta(milliseconds=50))
    with pytest.raises(StoreTimeoutError, match="'missing-key'.*50 ms|50 ms.*missing-key"):
        master.get("missing-key")
    master.set("k", "v")  # the connection is still usable after a timeout
    assert master.get("k") == b"v"


# -- startup -----------------------------------------------------------------------------------
def test_client_started_before_the_server_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    placeholder = socket.socket()  # holds the port, refusing connections, until the server starts
    placeholder.bind((HOST, 0))
    port = placeholder.getsockname()[1]
    refused = threading.Event()
    real_open = tcp_client.open_socket

    def spy(host: str, port: int, timeout: float) -> socket.socket:
        try:
            return real_open(host, port, timeout)
        except OSError:
            refused.set()
            raise

    monkeypatch.setattr(tcp_client, "open_socket", spy)

    def start_server_after_a_refusal() -> TCPStore:
        assert refused.wait(10)
        placeholder.close()
        return TCPStore(HOST, port, is_master=True, wait_for_workers=False, timeout=TIMEOUT)

    with ThreadPoolExecutor(1) as pool:
        server = pool.submit(start_server_after_a_refusal)
        with TCPStore(HOST, port, timeout=TIMEOUT) as client:
            client.set("k", "v")
            with server.result(timeout=10) as master:
                assert master.get("k") == b"v"


def test_unreachable_server_message() -> None:
    placeholder = socket.socket()
    placeholder.bind((HOST, 0))
    port = placeholder.getsockname()[1]
    with pytest.raises(StoreTimeoutError) as info:
        TCPStore(HOST, port, timeout=timedelta(milliseconds=50))
    placeholder.close()
    message = str(info.value)
    assert f"{HOST}:{port}: could not reach the store" in message and "MASTER_ADDR" in message
    assert isinstance(info.value, DistStoreError)


def test_wait_for_workers_timeout_says_how_many_joined() -> None:
    with pytest.raises(StoreTimeoutError, match="1 of 3 workers"):
        TCPStore(HOST, 0, world_size=3, is_master=True, timeout=timedelta(milliseconds=50))


def test_wait_for_workers_on_a_given_listening_fd() -> None:
    listener = socket.create_server((HOST, 0))
    port = listener.getsockname()[1]
    fd = listener.detach()  # the master takes the descriptor over
    with ThreadPoolExecutor(1) as pool:
        master = pool.submit(TCPStore, HOST, port, 2, True, TIMEOUT, True, False, fd)
        with TCPStore(HOST, port, world_size=2, timeout=TIMEOUT) as worker:
            with master.result(timeout=10) as store:
                assert store.port == port
                worker.set("k", "v")
                assert store.get("k") == b"v"


def test_port_in_use_without_multi_tenant(master: TCPStore) -> None:
    with pytest.raises(DistStoreError, match=f"could not listen on port {master.port}"):
        TCPStore(HOST, master.port, is_master=True, wait_for_workers=False, timeout=TIMEOUT)


def test_not_an_accord_server() -> None:
    listener = socket.create_server((HOST, 0))

    def answer_nonsense() -> None:
        conn, _ = listener.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()

    thread = threading.Thread(target=answer_nonsense)
    thread.start()
    with pytest.raises(DistStoreError, match="protocol"):
        TCPStore(HOST, listener.getsockname()[1], timeout=TIMEOUT)
    thread.join()
    listener.close()


# -- tenancy, connection loss, properties ------------------------------------------------------
def test_multi_tenant_masters_share_one_server() -> None:
    first = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, multi_tenant=True,
                     timeout=TIMEOUT)
    second = TCPStore(HOST, first.port, is_master=True, wait_for_workers=False, multi_tenant=True,
                      timeout=TIMEOUT)
    assert second.port == first.port
    first.set("shared", "yes")
    assert second.get("shared") == b"yes"
    server = second._server
    first.close()
    assert second.get("shared") == b"yes"  # the server lives while a tenant remains
    second.close()
    assert server is not None and not server.running
    assert first.port not in tcp_servers._SHARED_SERVERS


def test_lost_server_names_host_and_port() -> None:
    master = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    client = TCPStore(HOST, master.port, timeout=TIMEOUT)
    master.close()
    with pytest.raises(DistStoreError, match=f"{HOST}:{master.port}.*lost the connection"):
        client.get("k")
    with pytest.raises(DistStoreError, match="broke earlier"):
        client.set("k", "v")
    client.close()


def test_closed_store_raises(master: TCPStore) -> None:
    client = TCPStore(HOST, master.port, timeout=TIMEOUT)
    client.close()
    client.close()
    with pytest.raises(DistStoreError, match="closed"):
        client.set("k", "v")


def test_properties(master: TCPStore) -> None:
    assert master.host == HOST
    assert master.port > 0
    assert master.libuvBackend is False
    assert master.local_address() == HOST
    with master.clone() as clone:
        assert clone.port == master.port and clone.host == HOST


def test_closing_the_master_stops_the_server() -> None:
    master = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    server = master._server
    master.close()
    assert server is not None and not server.running
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, master.port), timeout=10).close()


def test_close_from_another_thread_interrupts_a_blocked_get(master: TCPStore) -> None:
    client = TCPStore(HOST, master.port, timeout=TIMEOUT)
    with ThreadPoolExecutor(1) as pool:
        blocked = pool.submit(client.get, "never")
        client.close()
        with pytest.raises(DistStoreError, match="closed"):  # whether or not get was sent yet
            blocked.result(timeout=10)


def test_the_server_answers_pipelined_requests_in_order(master: TCPStore) -> None:
    sock = _raw(master.port)
    sock.sendall(HELLO + p.request(C.SET, keys=[b"/a"], values=[b"1"]) +
                 p.request(C.ADD, keys=[b"/n"], number=2) + p.request(C.GET, keys=[b"/a"]) +
                 p.request(C.CHECK, keys=[b"/a", b"/b"]))
    expected = OK + p.reply_i64(2) + p.string(b"1") + p.reply_u8(p.NOT_READY)
    assert sock.recv(len(expected), socket.MSG_WAITALL) == expected
    sock.close()


def test_num_keys_after_one_set_is_two_as_on_torch() -> None:
    """The reference page's example: the store of a world_size counts "init/" (wait_for_workers)."""
    with TCPStore(HOST, 0, 1, True, TIMEOUT) as store:
        store.set("first_key", "first_value")
        assert store.num_keys() == 2
        assert store.list_keys() == ["first_key"]
    with TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT) as store:
        store.set("first_key", "first_value")
        assert store.num_keys() == 1


def test_a_wait_longer_than_the_store_timeout_keeps_the_connection(
        master: TCPStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tcp_store, "_REPLY_GRACE_S", 0.05)  # replies are due 150 ms after a call
    master.set("present", "1")
    with TCPStore(HOST, master.port, timeout=timedelta(milliseconds=100)) as client:
        with pytest.raises(StoreTimeoutError, match=r"waiting for \['absent'\]"):
            client.wait(["present", "absent"], timedelta(milliseconds=300))
        threading.Timer(0.2, master.set, ("late", "v")).start()
        client.wait(["late"], timedelta(seconds=5))
        client.set_timeout(timedelta(seconds=5))
        assert client.get("late") == b"v"
