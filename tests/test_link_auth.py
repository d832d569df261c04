"""The job's secret on rank-to-rank links (transport/handshake.py): a stranger that connects
to a rank's listener during start-up, without the secret or with another, is refused with a
warning naming its address, and the job starts as if it had not come."""

from __future__ import annotations

import logging
import socket
import threading
import warnings

import pytest

import accord
from accord import auth
from accord.store.hash_store import HashStore
from accord.timeouts import Deadline
from accord.transport import bootstrap, handshake
from accord.transport.addresses import default_route_address
from accord.transport.bootstrap import PeerRecord, connect_mesh

PREFIX = "job/links"


@pytest.fixture(autouse=True)
def tcp_only(monkeypatch):
    monkeypatch.setenv("ACCORD_TRANSPORT", "tcp")
    monkeypatch.setattr(bootstrap, "_HANDSHAKE_S", 0.5)  # a silent stranger is dropped sooner


def _build(store, rank, size, meshes, errors):
    try:
        meshes[rank] = connect_mesh(store, PREFIX, rank, size, Deadline.after(20))
    except BaseException as exc:  # noqa: BLE001
        errors[rank] = exc


def _stranger(store, secret, connected, outcome, claim=1, size=2, speak=True):
    """Connect to rank 0's listener as rank ``claim``, with ``secret`` (``connected`` is set
    once the connection waits in rank 0's backlog); ``outcome`` gets what it raised."""
    store.wait([f"{PREFIX}/peer/0"], 20)
    record = PeerRecord.decode(store.get(f"{PREFIX}/peer/0"))
    sock = socket.create_connection((record.host, record.port), timeout=10)
    connected.set()
    outcome.append(_speak(sock, secret, claim, size, speak))


def _speak(sock, secret, claim, size, speak):
    try:
        if speak:
            handshake.connector_side(sock, claim, 0, size, PREFIX.encode(), secret, "rank 0")
        else:
            sock.recv(1)  # says nothing: rank 0 gives up on it
        return None
    except Exception as exc:  # noqa: BLE001
        return exc
    finally:
        sock.close()


@pytest.mark.parametrize("theirs", [b"another secret", None, "silent"])
def test_a_stranger_is_refused_and_the_job_starts(monkeypatch, caplog, theirs):
    monkeypatch.setenv("ACCORD_SECRET", "the job's")
    store = HashStore()
    meshes, errors = {}, {}
    rank0 = threading.Thread(target=_build, args=(store, 0, 2, meshes, errors))
    connected, outcome = threading.Event(), []
    secret = None if theirs == "silent" else theirs
    stranger = threading.Thread(target=_stranger, args=(store, secret, connected, outcome),
                                kwargs={"speak": theirs != "silent"})
    with caplog.at_level(logging.WARNING, logger="accord"):
        rank0.start()
        stranger.start()
        assert connected.wait(20)
        _build(store, 1, 2, meshes, errors)  # the real rank 1 comes after the stranger
        rank0.join(30)
        stranger.join(30)
    raised = outcome[0]
    assert not errors, errors
    assert sorted(meshes) == [0, 1]
    for mesh in meshes.values():
        mesh.close()
    assert "rank 0: refused a connection from " in caplog.text, caplog.text
    if theirs == b"another secret":
        assert isinstance(raised, accord.AuthenticationError), raised
        assert "refused the link during authentication" in str(raised)
        assert "proved another secret" in caplog.text
    elif theirs is None:
        assert "did not authenticate: it lacks the job's secret" in caplog.text
    else:
        assert "did not finish the handshake in time" in caplog.text


def test_ranks_with_the_same_secret_prove_it_to_each_other(monkeypatch):
    monkeypatch.setenv("ACCORD_SECRET", "shared")
    store = HashStore()
    meshes, errors = {}, {}
    threads = [threading.Thread(target=_build, args=(store, r, 3, meshes, errors)) for r in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and sorted(meshes) == [0, 1, 2]
    for mesh in meshes.values():
        mesh.close()


def test_a_process_that_cannot_prove_the_secret_is_not_taken_for_a_rank(monkeypatch):
    """The connector checks the acceptor's proof too: an impostor listening where rank 0
    published its address gets no link."""
    monkeypatch.setenv("ACCORD_SECRET", "shared")
    impostor = socket.create_server(("127.0.0.1", 0))
    port = impostor.getsockname()[1]

    def answer():
        conn, _ = impostor.accept()
        with conn:
            handshake._read_frame(conn)  # the HELLO
            conn.sendall(handshake._frame(b"n" * 32))  # a challenge
            handshake._read_frame(conn, 32)  # the connector's proof
            conn.sendall(handshake._frame(b"p" * 32))  # a proof it cannot make

    thread = threading.Thread(target=answer)
    thread.start()
    sock = socket.create_connection(("127.0.0.1", port))
    with pytest.raises(accord.AuthenticationError, match="could not prove the job's secret"):
        handshake.connector_side(sock, 1, 0, 2, b"token", b"shared", f"127.0.0.1:{port}")
    sock.close()
    thread.join(10)
    impostor.close()


# -- the warning of a job without a secret that listens beyond loopback ----------------------------
def _listen_without_secret(monkeypatch, hosts: tuple[str, ...] = ()) -> list[warnings.WarningMessage]:
    """Build a 2-rank mesh with no secret on this host's network address (where the store
    sends it when nothing else is set); ``hosts`` poses the ranks as on those hosts. The
    InsecureListenWarnings the process got."""
    address = default_route_address()
    if address is None or auth.is_loopback(address):
        pytest.skip("this host has no network address beyond loopback")
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    monkeypatch.setattr(auth, "_warned", threading.Event())  # once per process: this test's
    if hosts:
        names = {f"rank{r}": host for r, host in enumerate(hosts)}
        monkeypatch.setattr(bootstrap, "host_identity", lambda: names[threading.current_thread().name])
    store = HashStore()
    meshes, errors = {}, {}
    threads = [threading.Thread(target=_build, args=(store, r, 2, meshes, errors), name=f"rank{r}")
               for r in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not errors and sorted(meshes) == [0, 1]
    for mesh in meshes.values():
        mesh.close()
    return [w for w in caught if issubclass(w.category, accord.InsecureListenWarning)]


def test_a_one_host_job_on_a_network_address_is_told_how_to_stay_on_loopback(monkeypatch):
    """Ray Train's case: every rank on one node, MASTER_ADDR the node's address. The warning
    names the variables that fix it, and the first of them does."""
    (warned,) = _listen_without_secret(monkeypatch)
    text = str(warned.message)
    assert f"listens on {default_route_address()}" in text and "all 2 ranks run on this host" in text
    assert "set ACCORD_SOCKET_IFNAME=lo" in text and "listens on 127.0.0.1 only" in text
    assert 'ray.init(runtime_env={"env_vars": {"ACCORD_SOCKET_IFNAME": "lo"}})' in text
    assert "or set ACCORD_SECRET (or ACCORD_SECRET_FILE) to the same value" in text
    monkeypatch.setenv("ACCORD_SOCKET_IFNAME", "lo")
    assert _listen_without_secret(monkeypatch) == []


def test_a_world_of_one_rank_listens_on_loopback_only(monkeypatch):
    """A world of one connects to nobody: where the store's address would put a larger job's
    listener, its own stays on loopback, and nothing warns about it."""
    address = default_route_address()
    if address is None or auth.is_loopback(address):
        pytest.skip("this host has no network address beyond loopback")
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    monkeypatch.setattr(auth, "_warned", threading.Event())
    meshes, errors = {}, {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _build(HashStore(), 0, 1, meshes, errors)
    assert not errors and meshes[0].records[0].host == "127.0.0.1"
    meshes[0].close()
    assert not [w for w in caught if issubclass(w.category, accord.InsecureListenWarning)]


def test_a_job_across_hosts_is_told_to_set_a_secret(monkeypatch):
    (warned,) = _listen_without_secret(monkeypatch, hosts=("host-a", "host-b"))
    text = str(warned.message)
    assert "and the job has no secret" in text and "run on this host" not in text
    assert "Set ACCORD_SECRET (or ACCORD_SECRET_FILE) to the same value on every rank" in text
