"""A process hosting the TCPStore server keeps it up, at close or exit, while other processes'
clients are still connected (bounded by ACCORD_STORE_EXIT_GRACE)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from accord.errors import DistStoreError
from accord.store import TCPStore
from accord.store import tcp_protocol as p

HOST = "127.0.0.1"
TIMEOUT = timedelta(seconds=10)

# The master process: hosts the store, sets a key, says so, and leaves without closing it.
_MASTER = """
import sys
from datetime import timedelta
from accord.store import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=10))
store.set("from-master", "bye")
print(store.port, flush=True)
sys.stdin.readline()  # the test says when to exit
"""


def _start_master(grace: float) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, ACCORD_STORE_EXIT_GRACE=str(grace))
    proc = subprocess.Popen([sys.executable, "-c", _MASTER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _exit(proc: subprocess.Popen) -> float:
    """Tell the master to exit; the moment it was told."""
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    return time.monotonic()


@pytest.mark.multiprocess
def test_exiting_master_serves_a_connected_client_until_it_leaves() -> None:
    proc, port = _start_master(grace=30)
    try:
        client = TCPStore(HOST, port, timeout=TIMEOUT)
        told = _exit(proc)
        time.sleep(0.5)  # the master's main thread has returned by now
        assert proc.poll() is None, "the master exited with a client still connected"
        assert client.get("from-master") == b"bye"
        client.set("late", "still served")
        assert client.get("late") == b"still served"
        client.close()
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - told < 10  # it left as soon as the client did, not at 30 s
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.multiprocess
def test_the_grace_period_bounds_the_wait() -> None:
    proc, port = _start_master(grace=0.5)
    try:
        client = TCPStore(HOST, port, timeout=TIMEOUT)
        told = _exit(proc)
        assert proc.wait(timeout=10) == 0
        assert 0.4 < time.monotonic() - told < 8
        with pytest.raises(DistStoreError, match="lost the connection"):
            client.get("from-master")
        client.close()
    finally:
        proc.kill()
        proc.wait()


def _peer(port: int) -> socket.socket:
    """A raw, validated connection: not one of this process's TCPStore clients, so it stands
    for another process."""
    peer = socket.create_connection((HOST, port), timeout=10)
    peer.sendall(p.request(p.Command.VALIDATE, number=p.MAGIC) +
                 p.request(p.Command.PING, number=7))
    assert peer.recv(4, socket.MSG_WAITALL) == p.reply_u32(7)
    return peer


def test_close_returns_and_the_server_serves_on_until_the_others_leave(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_STORE_EXIT_GRACE", "30")
    master = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    master.set("k", "v")
    server, peer = master._server, _peer(master.port)
    assert server is not None
    with caplog.at_level(logging.DEBUG, logger="accord.store.tcp_server"):
        start = time.monotonic()
        master.close()  # destroy_process_group on rank 0 must not block on its peers
        assert time.monotonic() - start < 1
        assert server.retiring
        peer.sendall(p.request(p.Command.GET, keys=[b"/k"]))
        assert peer.recv(9, socket.MSG_WAITALL) == p.string(b"v")
        peer.close()
        deadline = time.monotonic() + 10
        while server.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not server.running
    assert "waited" in caplog.text and "1 client(s) of other processes" in caplog.text


def test_a_new_master_on_the_port_revives_a_retiring_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """init again on the same MASTER_PORT: the retiring server serves on, with its keys and its
    clients (another process that started over sooner may be one of them, mid-rendezvous)."""
    monkeypatch.setenv("ACCORD_STORE_EXIT_GRACE", "30")
    first = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    first.set("old", "1")
    peer, server = _peer(first.port), first._server
    first.close()
    assert server is not None and server.retiring
    with TCPStore(HOST, first.port, is_master=True, wait_for_workers=False, multi_tenant=True,
                  timeout=TIMEOUT) as second:  # init again on the same MASTER_PORT
        assert second._server is server and server.running and not server.retiring
        assert second.get("old") == b"1"
        peer.sendall(p.request(p.Command.PING, number=8))  # the other process's client
        assert peer.recv(4, socket.MSG_WAITALL) == p.reply_u32(8)
    assert server.retiring  # closed again: retiring again, for the peer still connected
    peer.close()


def test_a_new_master_for_another_address_takes_over_from_a_retiring_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_STORE_EXIT_GRACE", "30")
    first = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    first.set("old", "1")
    peer, server = _peer(first.port), first._server
    first.close()
    assert server is not None and server.retiring
    with TCPStore("localhost", first.port, is_master=True, wait_for_workers=False,
                  timeout=TIMEOUT) as second:  # told another address: a server of its own
        assert not server.running and second._server is not server
        assert second.num_keys() == 0
    peer.close()


def test_clients_of_the_same_process_do_not_hold_the_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_STORE_EXIT_GRACE", "30")
    master = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    client = TCPStore(HOST, master.port, timeout=TIMEOUT)
    clone = master.clone()
    start = time.monotonic()
    master.close()
    assert time.monotonic() - start < 2
    client.close()
    clone.close()


def test_zero_grace_stops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_STORE_EXIT_GRACE", "0")
    master = TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    peer = socket.create_connection((HOST, master.port), timeout=10)
    start = time.monotonic()
    master.close()
    assert time.monotonic() - start < 2
    peer.settimeout(10)
    try:  # closed by the server (reset if it was still in the listener's backlog)
        assert peer.recv(10) == b""
    except ConnectionResetError:
        pass
    peer.close()
