"""TLS (accord/tls.py): with ACCORD_TLS_CERT / KEY / CA, the store and the rank-to-rank links
speak TLS with certificates checked both ways; a peer without TLS, or whose certificate
another CA signed, is refused; a job runs over it (TCP transport: every byte through TLS)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import accord
from accord import tls
from accord.store.tcp_server import TCPStoreServer
from accord.store.tcp_store import TCPStore

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="the openssl command makes the test certificates")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _authority(folder: Path, name: str) -> dict[str, str]:
    """A CA and one certificate it signed, as files in ``folder``."""
    folder.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", f"/CN={name}-ca", cwd=folder)
    _openssl("req", *ec, "-keyout", "job.key", "-out", "job.csr", "-subj", f"/CN={name}",
             cwd=folder)
    _openssl("x509", "-req", "-in", "job.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "job.pem", "-days", "2", cwd=folder)
    return {"ACCORD_TLS_CERT": str(folder / "job.pem"), "ACCORD_TLS_KEY": str(folder / "job.key"),
            "ACCORD_TLS_CA": str(folder / "ca.pem")}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls")
    return _authority(root / "job", "accord-job"), _authority(root / "other", "stranger")


def _use(monkeypatch, files: dict[str, str] | None) -> None:
    for name in ("ACCORD_TLS_CERT", "ACCORD_TLS_KEY", "ACCORD_TLS_CA"):
        if files is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, files[name])


def test_the_three_files_go_together(monkeypatch, certificates):
    job, _ = certificates
    _use(monkeypatch, job)
    assert tls.enabled()
    monkeypatch.delenv("ACCORD_TLS_CA")
    with pytest.raises(accord.AuthenticationError, match="ACCORD_TLS_CA unset"):
        tls.enabled()


def test_the_store_over_tls_refuses_plain_and_foreign_clients(monkeypatch, certificates, caplog):
    job, other = certificates
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    _use(monkeypatch, job)
    server = TCPStoreServer(0, host="127.0.0.1")
    try:
        client = TCPStore("127.0.0.1", server.port, timeout=timedelta(seconds=5))
        client.set("k", b"v" * 100_000)  # several TLS records
        assert client.get("k") == b"v" * 100_000 and client.add("n", 2) == 2
        _use(monkeypatch, other)
        with pytest.raises(accord.AuthenticationError, match="TLS handshake with TCPStore"):
            TCPStore("127.0.0.1", server.port, timeout=timedelta(seconds=5))
        _use(monkeypatch, None)
        with pytest.raises(accord.DistStoreError):  # a plain client: the server drops it
            TCPStore("127.0.0.1", server.port, timeout=timedelta(seconds=3))
        _use(monkeypatch, job)
        assert client.get("k") == b"v" * 100_000  # the job's client never noticed
        client.close()
    finally:
        server.close()
    assert "TLS handshake failed" in caplog.text


SCRIPT = """
import sys, numpy as np, accord as dist
from datetime import timedelta
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                        timeout=timedelta(seconds=30))
big = np.arange(1 << 20, dtype=np.float32) * (rank + 1)
dist.all_reduce(big)
ok = bool((big == np.arange(1 << 20, dtype=np.float32) * 3).all())
t = np.zeros(5)
if rank == 0:
    dist.send(np.arange(5.0), dst=1)
else:
    dist.recv(t, src=0)
print("RESULT", rank, ok, t.tolist(), flush=True)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.multiprocess
@pytest.mark.parametrize("transport", ["tcp", "auto"])
def test_a_job_over_tls(certificates, transport):
    job, _ = certificates
    import os

    env = dict(os.environ, ACCORD_TRANSPORT=transport, **job)
    env.pop("ACCORD_SECRET", None)
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(rank), port], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [proc.communicate(timeout=120) for proc in procs]
    for rank, (proc, (out, err)) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, err
        expected = "[0.0, 0.0, 0.0, 0.0, 0.0]" if rank == 0 else "[0.0, 1.0, 2.0, 3.0, 4.0]"
        assert f"RESULT {rank} True {expected}" in out, out
        assert "InsecureListenWarning" not in err


def test_a_rank_whose_certificate_another_ca_signed_is_refused(monkeypatch, certificates, caplog):
    import logging
    import ssl
    import threading

    from accord.store.hash_store import HashStore
    from accord.timeouts import Deadline
    from accord.transport.bootstrap import PeerRecord, connect_mesh

    job, other = certificates
    monkeypatch.delenv("ACCORD_SECRET", raising=False)
    monkeypatch.setenv("ACCORD_TRANSPORT", "tcp")
    _use(monkeypatch, job)
    store, meshes, errors = HashStore(), {}, {}

    def build(rank):
        try:
            meshes[rank] = connect_mesh(store, "tls/job", rank, 2, Deadline.after(20))
        except BaseException as exc:  # noqa: BLE001
            errors[rank] = exc

    stranger_ctx = tls._context(ssl.PROTOCOL_TLS_CLIENT, other["ACCORD_TLS_CERT"],
                                other["ACCORD_TLS_KEY"], other["ACCORD_TLS_CA"])
    outcome, connected = [], threading.Event()

    def stranger():
        store.wait(["tls/job/peer/0"], 20)
        record = PeerRecord.decode(store.get("tls/job/peer/0"))
        sock = socket.create_connection((record.host, record.port), timeout=10)
        connected.set()
        try:
            stranger_ctx.wrap_socket(sock)
        except (ssl.SSLError, OSError) as exc:
            outcome.append(exc)
        finally:
            sock.close()

    with caplog.at_level(logging.WARNING, logger="accord"):
        rank0 = threading.Thread(target=build, args=(0,))
        intruder = threading.Thread(target=stranger)
        rank0.start()
        intruder.start()
        assert connected.wait(20)
        build(1)
        rank0.join(30)
        intruder.join(30)
    assert not errors and sorted(meshes) == [0, 1], errors
    for mesh in meshes.values():
        mesh.close()
    assert outcome and isinstance(outcome[0], ssl.SSLError)  # it could not check rank 0 either
    assert "rank 0: refused a connection from" in caplog.text, caplog.text
