"""accord's TCPStore and torch's, mixed: every operation by each client kind against each server
kind (accord, torch libuv, torch legacy), clients of both kinds on one server, PrefixStores,
wait_for_workers, and misbehaving clients. Real servers and clients, no mocks.

Servers run in processes of their own (store_server.py): torch's client keeps the GIL in
queue_len and list_keys, so it must not share a process with a server served by a Python thread.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from itertools import count
from pathlib import Path
from typing import Callable, Iterator

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as td  # noqa: E402 — after the importorskip

from accord.errors import QueueEmptyError, StoreLimitError  # noqa: E402
from accord.store import PrefixStore, TCPStore  # noqa: E402
from accord.store import tcp_protocol as p  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess]

HOST = "127.0.0.1"
TIMEOUT = timedelta(seconds=20)
SERVER = Path(__file__).with_name("store_server.py")
SERVER_KINDS = ["accord", "torch", "torch-legacy"]
_RUNS = count()


class Server:
    """A store server in a subprocess; ``stop()`` ends it."""

    def __init__(self, kind: str, world_size: int | None = None) -> None:
        args = [sys.executable, str(SERVER), kind] + ([str(world_size)] if world_size else [])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.kind = kind
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def ready(self) -> bool:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    started = {kind: Server(kind) for kind in SERVER_KINDS}
    for server in started.values():
        assert server.ready()
    yield started
    for server in started.values():
        server.stop()


def client(kind: str, server: Server, **options) -> object:  # noqa: ANN003
    if kind == "accord":
        return TCPStore(HOST, server.port, timeout=TIMEOUT, **options)
    return td.TCPStore(HOST, server.port, timeout=TIMEOUT, use_libuv=server.kind != "torch-legacy",
                       **options)


def _outcome(call: Callable[[], object]) -> object:
    """A call's result, or what kind of error it raised (accord's and torch's named alike)."""
    try:
        result = call()
    except QueueEmptyError:
        return "queue empty"
    except td.QueueEmptyError:
        return "queue empty"
    except (RuntimeError, TimeoutError) as exc:  # DistStoreError / StoreTimeoutError of both
        return "timeout" if "time" in str(exc).lower() else f"error: {type(exc).__name__}"
    return result


def sequence(store, prefix: str, queues: bool) -> list:  # noqa: ANN001 - either kind
    """Every store operation, in an order whose results are fixed; keys under ``prefix``."""
    k = lambda name: f"{prefix}{name}"  # noqa: E731
    base = store.num_keys()
    short = timedelta(milliseconds=100)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("set", lambda: store.set(k("k"), b"v1")), ("get", lambda: store.get(k("k"))),
        ("add", lambda: store.add(k("c"), 5)), ("add-", lambda: store.add(k("c"), -2)),
        ("cas-new", lambda: store.compare_set(k("cs"), b"", b"new")),
        ("cas-absent", lambda: store.compare_set(k("cs2"), b"x", b"y")),
        ("cas-match", lambda: store.compare_set(k("cs"), b"new", b"newer")),
        ("cas-mismatch", lambda: store.compare_set(k("cs"), b"zzz", b"q")),
        ("check", lambda: store.check([k("k"), k("c")])),
        ("check-missing", lambda: store.check([k("k"), k("nope")])),
        ("wait", lambda: store.wait([k("k")])),
        ("wait-timeout", lambda: store.wait([k("nope")], short)),
        ("num_keys", lambda: store.num_keys() - base),
        ("delete", lambda: store.delete_key(k("k"))),
        ("delete-again", lambda: store.delete_key(k("k"))),
        ("append", lambda: store.append(k("ap"), b"ab")),
        ("append2", lambda: store.append(k("ap"), b"cd")), ("get-ap", lambda: store.get(k("ap"))),
        ("multi_set", lambda: store.multi_set([k("m1"), k("m2")], [b"1", b"2"])),
        ("multi_get", lambda: store.multi_get([k("m1"), k("m2")])),
        ("list_keys", lambda: sorted(x[len(prefix):] for x in store.list_keys()
                                     if x.startswith(prefix))),
        ("barrier", lambda: store.barrier(k("b"), 1)),
        ("num_keys-end", lambda: store.num_keys() - base),
    ]
    if queues:
        steps += [
            ("push", lambda: store.queue_push(k("q"), b"x1")),
            ("push2", lambda: store.queue_push(k("q"), b"x2")),
            ("queue_len", lambda: store.queue_len(k("q"))),
            ("check-queue", lambda: store.check([k("q")])),
            ("pop", lambda: store.queue_pop(k("q"))),
            ("pop-nonblocking", lambda: store.queue_pop(k("q"), block=False)),
            ("pop-empty", lambda: store.queue_pop(k("q"), block=False)),
            ("num_keys-queues", lambda: store.num_keys() - base),
        ]
    results = [(name, _outcome(call)) for name, call in steps]
    store.set_timeout(short)
    results.append(("get-timeout", _outcome(lambda: store.get(k("never")))))
    results.append(("pop-timeout", _outcome(lambda: store.queue_pop(k("idle")))) if queues
                   else ("pop-timeout", None))
    return results


def _reference(servers: dict[str, Server], queues: bool) -> list:
    store = client("torch", servers["torch"])
    return sequence(store, f"ref{next(_RUNS)}/", queues)


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("client_kind", ["accord", "torch"])
def test_every_operation_gives_torchs_results(servers: dict[str, Server], server_kind: str,
                                              client_kind: str) -> None:
    queues = server_kind != "torch-legacy"  # torch's legacy server has no queues
    store = client(client_kind, servers[server_kind])
    got = sequence(store, f"run{next(_RUNS)}/", queues)
    assert got == _reference(servers, queues)
    assert dict(got)["num_keys-end"] == 6
    assert dict(got)["list_keys"] == ["ap", "c", "cs", "m1", "m2"]


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
def test_clients_of_both_kinds_share_one_server(servers: dict[str, Server],
                                                server_kind: str) -> None:
    server, prefix = servers[server_kind], f"mixed{next(_RUNS)}/"
    ours, theirs = client("accord", server), client("torch", server)
    theirs.set(f"{prefix}from-torch", b"t")
    ours.set(f"{prefix}from-accord", b"a")
    assert ours.get(f"{prefix}from-torch") == b"t"
    assert theirs.get(f"{prefix}from-accord") == b"a"
    assert ours.add(f"{prefix}n", 2) == 2 and theirs.add(f"{prefix}n", 3) == 5
    # a blocking get on one kind is released by a set from the other
    released = threading.Timer(0.2, lambda: theirs.set(f"{prefix}later", b"late"))
    released.start()
    assert ours.get(f"{prefix}later") == b"late"
    released.join()
    mine = sorted(k for k in ours.list_keys() if k.startswith(prefix))
    assert mine == sorted(k for k in theirs.list_keys() if k.startswith(prefix))
    # PrefixStores of either kind over either client see each other's keys
    accord_view, torch_view = PrefixStore(f"{prefix}pg", ours), td.PrefixStore(f"{prefix}pg", theirs)
    accord_view.set("x", b"1")
    torch_view.set("y", b"2")
    assert torch_view.get("x") == b"1" and accord_view.get("y") == b"2"
    assert accord_view.list_keys() == sorted(torch_view.list_keys()) == ["x", "y"]
    if server_kind != "torch-legacy":
        theirs.queue_push(f"{prefix}jobs", b"job")
        assert ours.queue_pop(f"{prefix}jobs") == b"job"


@pytest.mark.parametrize("master_kind, worker_kind", [("accord", "torch"), ("torch", "accord")])
def test_wait_for_workers_across_kinds(master_kind: str, worker_kind: str) -> None:
    server = Server(master_kind, world_size=3)
    try:
        workers = [client(worker_kind, server, world_size=3) for _ in range(2)]
        assert server.ready()  # the master's constructor returned: both workers counted
        assert workers[1].num_keys() == 1  # "init/" alone, as torch counts
        assert workers[0].list_keys() == []  # which no client lists
    finally:
        server.stop()


def test_num_keys_after_one_set_is_two_as_the_reference_page_says() -> None:
    for store in (TCPStore(HOST, 0, 1, True, TIMEOUT),
                  td.TCPStore(HOST, 0, 1, True, TIMEOUT)):
        store.set("first_key", "first_value")
        assert store.num_keys() == 2
        del store


def test_bad_clients_leave_torch_clients_alone(servers: dict[str, Server], caplog) -> None:  # noqa: ANN001
    server, prefix = servers["accord"], f"bad{next(_RUNS)}/"
    good = client("torch", server)
    for garbage in (b"GET / HTTP/1.1\r\n\r\n", b"\x00\xce\xf7\x85\x3c\x63", bytes(range(256))):
        with socket.create_connection((HOST, server.port)) as sock:
            sock.sendall(garbage)
            sock.settimeout(10)
            try:
                assert sock.recv(100) == b""  # closed by the server, nothing answered
            except ConnectionResetError:
                pass
    oversized = client("torch", server)
    with pytest.raises(RuntimeError, match="reset|closed"):  # torch's client: no word but this
        oversized.set(f"{prefix}big", b"x" * (p.MAX_VALUE_BYTES + 1))
        oversized.get(f"{prefix}big")
    good.set(f"{prefix}after", b"fine")
    assert client("accord", server).get(f"{prefix}after") == b"fine"


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
def test_accords_client_refuses_what_a_server_would_drop(servers: dict[str, Server],
                                                         server_kind: str) -> None:
    store = client("accord", servers[server_kind])
    with pytest.raises(StoreLimitError, match="8 MiB"):
        store.set("big", b"x" * (p.MAX_VALUE_BYTES + 1))
    with pytest.raises(ValueError, match="limit of 8192"):
        store.get("k" * p.MAX_KEY_BYTES)
    store.set("small", b"still connected")
    assert store.get("small") == b"still connected"


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
def test_accords_client_explains_a_refused_request(servers: dict[str, Server],
                                                   server_kind: str) -> None:
    store, prefix = client("accord", servers[server_kind]), f"refused{next(_RUNS)}/"
    store.set(f"{prefix}word", b"hello")
    with pytest.raises(RuntimeError, match="refused the request: likely the key holds a value "
                                           "that is not an integer.*reconnected"):
        store.add(f"{prefix}word", 1)
    assert store.get(f"{prefix}word") == b"hello"  # the handle works again
    if server_kind == "torch-legacy":
        store.queue_push(f"{prefix}q", b"1")
        with pytest.raises(RuntimeError, match="legacy one.*no queues"):
            store.queue_len(f"{prefix}q")
