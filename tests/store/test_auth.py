"""The job's secret on the store: accord's authentication in front of torch's TCPStore protocol
(store/tcp_auth.py), where the secret comes from (auth.py), and who is refused and how."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import warnings
from datetime import timedelta

import pytest

import accord
from accord import auth
from accord.launcher import admission
from accord.store.tcp_auth import AUTH, ServerGate, Verdict
from accord.store.tcp_server import TCPStoreServer
from accord.store.tcp_store import TCPStore

SHORT = timedelta(seconds=5)


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("ACCORD_SECRET", "job-secret")
    monkeypatch.delenv("ACCORD_SECRET_FILE", raising=False)
    return b"job-secret"


def _client(port: int) -> TCPStore:
    return TCPStore("127.0.0.1", port, timeout=SHORT)


# -- where the secret comes from ---------------------------------------------------------------
def test_the_secret_comes_from_the_environment_or_an_owner_only_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    monkeypatch.delenv("ACCORD_SECRET_FILE", raising=False)
    assert auth.job_secret() is None
    path = tmp_path / "secret"
    path.write_bytes(b"from-a-file\n")
    path.chmod(0o600)
    monkeypatch.setenv("ACCORD_SECRET_FILE", str(path))
    assert auth.job_secret() == b"from-a-file"  # the final newline is not part of it
    path.chmod(0o644)
    with pytest.raises(accord.AuthenticationError, match="chmod 600"):
        auth.job_secret()
    monkeypatch.setenv("ACCORD_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(accord.AuthenticationError, match="cannot read it"):
        auth.job_secret()
    monkeypatch.setenv("ACCORD_SECRET", "wins")
    assert auth.job_secret() == b"wins"


def test_the_secret_is_never_shown_by_accord_config(monkeypatch):
    monkeypatch.setenv("ACCORD_SECRET", "do-not-print-me")
    lines: list[str] = []
    accord.config.describe(lines.append)
    text = "\n".join(lines)
    assert "ACCORD_SECRET = '<set, not shown>'" in text and "do-not-print-me" not in text


def test_proofs_are_bound_to_direction_nonces_and_context():
    a, b = auth.nonce(), auth.nonce()
    mine = auth.proof(b"s", b"label", auth.CONNECTOR, a, b, b"ctx")
    assert auth.check(b"s", mine, b"label", auth.CONNECTOR, a, b, b"ctx")
    assert not auth.check(b"s", mine, b"label", auth.ACCEPTOR, a, b, b"ctx")  # reflected
    assert not auth.check(b"s", mine, b"label", auth.CONNECTOR, auth.nonce(), b, b"ctx")  # replayed
    assert not auth.check(b"s", mine, b"other", auth.CONNECTOR, a, b, b"ctx")  # another protocol
    assert not auth.check(b"s", mine, b"label", auth.CONNECTOR, a, b, b"ctx2")  # another pair
    assert not auth.check(b"t", mine, b"label", auth.CONNECTOR, a, b, b"ctx")  # another secret


# -- the store ---------------------------------------------------------------------------------
def test_clients_with_the_secret_get_in(secret):
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=SHORT)
    try:
        master.set("k", "v")
        assert _client(master.port).get("k") == b"v"
    finally:
        master.close()


def _logged(caplog, text: str, within: float = 5.0) -> bool:
    """Whether the store's server logged ``text``: its thread may log after the client
    already raised (seen once in a full run), so wait for it a little."""
    deadline = time.monotonic() + within
    while text not in caplog.text:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("theirs", ["another-secret", None])
def test_a_client_without_the_secret_is_refused_at_once_and_the_job_goes_on(secret, monkeypatch,
                                                                           caplog, theirs):
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=SHORT)
    try:
        master.set("k", "v")
        if theirs is None:
            monkeypatch.delenv("ACCORD_SECRET")
        else:
            monkeypatch.setenv("ACCORD_SECRET", theirs)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(accord.DistError) as raised:
            _client(master.port)
        assert time.monotonic() - started < 1.0
        message = str(raised.value)
        if theirs is None:  # the client cannot know why: it says what the likely cause is
            assert "requires the job's secret, which this process does not have" in message
            assert _logged(caplog, "did not authenticate")
        else:
            assert isinstance(raised.value, accord.AuthenticationError)
            assert "refused this process: its secret differs" in message
            assert _logged(caplog, "does not match this store's secret")
        monkeypatch.setenv("ACCORD_SECRET", "job-secret")
        assert master.get("k") == b"v" and _client(master.port).get("k") == b"v"
    finally:
        master.close()


def test_a_client_with_a_secret_refuses_a_store_without_one(monkeypatch):
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", accord.InsecureListenWarning)
        server = TCPStoreServer(0, host="127.0.0.1")
    try:
        monkeypatch.setenv("ACCORD_SECRET", "job-secret")
        with pytest.raises(accord.AuthenticationError, match="did not take part in authentication"):
            _client(server.port)
    finally:
        server.close()


def test_torchs_client_is_refused_by_a_store_with_a_secret(secret):
    torch = pytest.importorskip("torch.distributed")
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=SHORT)
    try:
        with pytest.raises(Exception):  # torch's client sees its connection closed
            torch.TCPStore("127.0.0.1", master.port, timeout=timedelta(seconds=1))
        master.set("still", "serving")
        assert master.get("still") == b"serving"
    finally:
        master.close()


def test_the_gate_refuses_garbage_and_early_proofs():
    gate = ServerGate(b"s")
    verdict, reply, _ = gate.feed(bytes([AUTH, 1]) + auth.nonce() + b"x" * 32)
    assert verdict is Verdict.REFUSED and "before the challenge" in gate.why
    gate = ServerGate(b"s")
    assert gate.feed(bytes([AUTH, 9]) + auth.nonce())[0] is Verdict.REFUSED
    gate = ServerGate(b"s")
    assert gate.feed(bytes([AUTH]))[0] is Verdict.PENDING  # a hello split over reads
    verdict, reply, _ = gate.feed(bytes([1]) + auth.nonce())
    assert verdict is Verdict.PENDING and len(reply) == auth.NONCE_BYTES
    assert gate.feed(b"\0" * 32)[:2] == (Verdict.REFUSED, bytes([0]))  # a wrong proof
    open_gate = ServerGate(None)
    assert open_gate.feed(b"\0abc") == (Verdict.OPEN, b"", b"\0abc")  # no secret: torch's protocol


def test_a_loopback_store_listens_on_loopback_only_and_an_exposed_one_warns(monkeypatch):
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    server = TCPStoreServer(0, host="127.0.0.1")
    try:
        assert server._listener.getsockname()[0] == "127.0.0.1"
    finally:
        server.close()
    monkeypatch.setattr(auth, "_warned", type(auth._warned)())
    with pytest.warns(accord.InsecureListenWarning, match="no secret"):
        exposed = TCPStoreServer(0)
    exposed.close()


# -- accordrun's admission of its own processes ---------------------------------------------------
def test_a_launcher_admits_its_descendants_and_nobody_else():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c",
                              f"import socket, time; s = socket.create_connection(('127.0.0.1', "
                              f"{port})); time.sleep(5)"])
    try:
        conn, _ = server.accept()
        if not os.path.isdir("/proc/self/fd"):
            pytest.skip("no /proc: nobody is admitted without the secret")
        assert admission.descendants_checker(os.getpid())(conn)
        assert not admission.descendants_checker(child.pid + 10_000_000)(conn)
        mine = socket.create_connection(("127.0.0.1", port))
        own, _ = server.accept()
        assert not admission.descendants_checker(os.getpid())(own)  # the launcher authenticates
        mine.close()
        own.close()
        conn.close()
    finally:
        child.kill()
        child.wait()
        server.close()


def test_a_client_with_a_secret_gives_up_on_torchs_store_quickly(monkeypatch):
    """torch's server ignores the AUTH byte (no answer, no close): the client stops waiting
    after _AUTH_ANSWER_S instead of the store's timeout."""
    torch = pytest.importorskip("torch.distributed")
    from accord.store import tcp_client

    monkeypatch.setattr(tcp_client, "_AUTH_ANSWER_S", 0.5)
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    server = torch.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                            timeout=timedelta(seconds=10))
    monkeypatch.setenv("ACCORD_SECRET", "job-secret")
    started = time.monotonic()
    with pytest.raises(accord.AuthenticationError, match="did not take part in authentication"):
        TCPStore("127.0.0.1", server.port, timeout=timedelta(seconds=30))
    assert time.monotonic() - started < 5
    del server
