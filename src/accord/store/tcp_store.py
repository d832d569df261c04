"""TCPStore: torch.distributed.TCPStore — a client, and on the master also the server.

Owns: connecting (with retries until the timeout), the HELLO handshake, one request/response
exchange per operation under a lock, turning responses into values or errors, waiting for
workers on the master, and sharing one server between ``multi_tenant`` masters. The bytes are
``tcp_protocol``'s and the server is ``tcp_server``'s. Must not know ranks or transports.

Threads: a TCPStore may be used from several threads; their operations take turns on the one
connection, so a blocking ``get`` holds up the other threads' calls until it returns. A thread
that blocks for long should use its own connection: ``clone()``.
"""

from __future__ import annotations

import atexit
import socket
import threading
import time
from datetime import timedelta
from typing import Sequence, TypeVar

from .. import config
from ..errors import DistStoreError, ProtocolError, QueueEmptyError, StoreTimeoutError
from ..timeouts import Deadline, format_seconds
from . import tcp_protocol as p
from .base import Store, Value, check_key, check_keys, to_bytes
from . import tcp_server
from .tcp_server import TCPStoreServer

R = TypeVar("R")

#: Extra time a reply may take beyond the operation's own timeout before the client gives up.
_REPLY_GRACE_S = 10.0
_RECV_BYTES = 1 << 16
_FIRST_RETRY_S, _MAX_RETRY_S = 0.01, 0.5

# Why module-level state: torch promises that every ``TCPStore(is_master=True,
# multi_tenant=True)`` of one process on one port shares one server. Such objects are created
# independently (often by different libraries), so the process is the only place they can
# meet. Port → [server, number of TCPStores using it]; guarded by the lock; an entry goes
# away when its last TCPStore closes.
_SHARED_SERVERS: dict[int, list] = {}
_SHARED_LOCK = threading.Lock()


def _acquire_server(port: int, multi_tenant: bool, listen_fd: int | None) -> TCPStoreServer:
    if not multi_tenant:
        return TCPStoreServer(port, listen_fd=listen_fd)
    with _SHARED_LOCK:
        entry = _SHARED_SERVERS.get(port) if port and listen_fd is None else None
        if entry is None:
            server = TCPStoreServer(port, listen_fd=listen_fd)
            entry = _SHARED_SERVERS[server.port] = [server, 0]
        entry[1] += 1
        return entry[0]


def _release_server(server: TCPStoreServer) -> None:
    with _SHARED_LOCK:
        entry = _SHARED_SERVERS.get(server.port)
        if entry is not None and entry[0] is server:
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _SHARED_SERVERS[server.port]
    server.close(_exit_grace())


def _exit_grace() -> float:
    try:
        return config.store_exit_grace()
    except ValueError:  # a malformed variable must not keep a server from closing
        return float(config.STORE_EXIT_GRACE.default or 0)


@atexit.register
def _drain_servers_at_exit() -> None:
    """At interpreter exit (daemon threads still run in atexit handlers), stop the servers
    nobody closed only once other processes' clients have left, bounded by the grace."""
    tcp_server.drain_at_exit(_exit_grace())


def _open_socket(host: str, port: int, timeout: float) -> socket.socket:
    """One connection attempt (a seam for tests)."""
    return socket.create_connection((host, port), timeout=timeout)


def _connect(host: str, port: int, seconds: float) -> socket.socket:
    """Connect, retrying with backoff until ``seconds`` pass: the server may start later."""
    deadline, pause = Deadline.after(seconds), _FIRST_RETRY_S
    while True:
        try:
            sock = _open_socket(host, port, max(deadline.remaining(), 0.001))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            last = exc
        remaining = deadline.remaining()
        if remaining <= 0:
            reason = getattr(last, "strerror", None) or str(last) or type(last).__name__
            raise StoreTimeoutError(
                f"TCPStore: could not reach {host}:{port} within {format_seconds(seconds)} "
                f"(last error: {reason}). Is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?"
            ) from last
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _MAX_RETRY_S)


class TCPStore(Store):
    """A store served over TCP by the master process (torch.distributed.TCPStore).

    Args, as torch's: ``host_name``/``port`` of the server (the master binds every interface;
    port 0 picks a free one, see ``port``); ``world_size`` processes expected; ``is_master``
    starts the server in this process (and connects to it); ``timeout`` bounds connecting and
    every waiting operation; with ``wait_for_workers`` and a ``world_size`` the master's
    constructor returns only once ``world_size`` stores (itself included) have connected;
    ``multi_tenant`` masters of one process share one server per port; ``master_listen_fd``
    is an already bound socket for the server (the store takes the descriptor over);
    ``use_libuv`` is accepted and ignored.
    """

    def __init__(self, host_name: str, port: int, world_size: int | None = None,
                 is_master: bool = False, timeout: timedelta = timedelta(seconds=300),
                 wait_for_workers: bool = True, multi_tenant: bool = False,
                 master_listen_fd: int | None = None, use_libuv: bool = True) -> None:
        super().__init__(timeout)
        self._sock: socket.socket | None = None
        self._server: TCPStoreServer | None = None
        self._host, self._port, self._world_size = host_name, int(port), world_size
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._closing = False
        self._local: tuple[str, int] | None = None
        if is_master:
            self._server = _acquire_server(self._port, multi_tenant, master_listen_fd)
            self._port = self._server.port
        try:
            self._connect(is_worker=True)
            if is_master and wait_for_workers and world_size is not None and world_size > 0:
                self._wait_for_workers(world_size)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        role = "master" if self._server is not None else "client"
        return f"TCPStore({self._host}:{self._port}, {role})"

    # -- torch's properties -----------------------------------------------------------------
    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The server's port (the real one when the master was given port 0)."""
        return self._port

    @property
    def libuvBackend(self) -> bool:  # noqa: N802 - torch's name
        """Always False: accord's server is a Python selectors loop, not libuv."""
        return False

    def local_address(self) -> str | None:
        """The IP address of this end of the connection to the store."""
        with self._lock:
            address = self._require_socket("local_address").getsockname()[0]
        return address[len("::ffff:"):] if address.startswith("::ffff:") else address

    # -- connection -------------------------------------------------------------------------
    def _where(self) -> str:
        return f"TCPStore {self._host}:{self._port}"

    def _connect(self, is_worker: bool) -> None:
        self._decoder = p.FrameDecoder(requests=False)
        self._sock = _connect(self._host, self._port, self._seconds(None))
        self._local = tcp_server.note_local_client(self._sock)
        answer = self._call(p.Hello(p.VERSION, is_worker), "HELLO", 0.0)
        if not isinstance(answer, p.OkResponse):
            raise self._unexpected(answer, "HELLO")

    def _wait_for_workers(self, world_size: int) -> None:
        seconds = self._seconds(None)
        joined = self._call(p.WaitWorkersRequest(world_size, seconds), "wait_for_workers", seconds)
        if not isinstance(joined, p.IntResponse):
            raise self._unexpected(joined, "wait_for_workers")
        if joined.value < world_size:
            raise StoreTimeoutError(
                f"TCPStore master on port {self._port}: {joined.value} of {world_size} workers "
                f"joined within {format_seconds(seconds)} (the master included). Did every rank "
                f"start, with MASTER_ADDR={self._host} and MASTER_PORT={self._port}?")

    def _require_socket(self, what: str) -> socket.socket:
        if self._sock is None:
            raise DistStoreError(f"{self._where()}: {what} on a closed TCPStore; create a new one.")
        if self._broken is not None:
            raise DistStoreError(f"{self._where()}: {what}: the connection broke earlier "
                                 f"({self._broken}); create a new TCPStore.")
        return self._sock

    def _call(self, request: object, what: str, wait_seconds: float) -> object:
        """Send one request and read its response (the server may take ``wait_seconds``)."""
        frame = p.encode_request(request)  # type: ignore[arg-type]
        with self._lock:
            sock = self._require_socket(what)
            limit = (wait_seconds or self._seconds(None)) + _REPLY_GRACE_S
            try:
                sock.settimeout(limit)
                sock.sendall(frame)
                return self._receive(sock, Deadline.after(limit))
            except socket.timeout:
                self._broken = f"no reply to {what} within {format_seconds(limit)}"
                raise StoreTimeoutError(f"{self._where()}: {self._broken}. Is the server process "
                                        f"(rank 0) overloaded or frozen?") from None
            except ProtocolError as exc:
                self._broken = str(exc)
                raise DistStoreError(
                    f"{self._where()}: the server's reply to {what} breaks accord's TCPStore "
                    f"protocol ({exc}). Is another program listening on that port, or a "
                    f"different accord version?") from exc
            except (OSError, EOFError) as exc:
                self._broken = f"{type(exc).__name__}: {exc}"
                if self._closing:
                    raise DistStoreError(f"{self._where()}: {what} was interrupted because "
                                         f"another thread closed this TCPStore.") from exc
                raise DistStoreError(
                    f"{self._where()}: lost the connection to the server during {what} "
                    f"({self._broken}). Did rank 0, which runs the store, exit or crash?") from exc

    def _receive(self, sock: socket.socket, deadline: Deadline) -> object:
        while True:
            sock.settimeout(max(deadline.remaining(), 0.001))
            data = sock.recv(_RECV_BYTES)
            if not data:
                raise EOFError("the server closed the connection")
            messages = self._decoder.feed(data)
            if len(messages) > 1:
                raise ProtocolError(f"{len(messages)} replies to one request")
            if messages:
                return messages[0]

    def _unexpected(self, answer: object, what: str) -> DistStoreError:
        if isinstance(answer, p.ErrorResponse):
            kind = QueueEmptyError if answer.code == p.ERR_QUEUE_EMPTY else DistStoreError
            return kind(f"{self._where()}: {answer.message}")
        self._broken = f"{type(answer).__name__} in reply to {what}"
        return DistStoreError(f"{self._where()}: the server answered {what} with "
                              f"{type(answer).__name__}; is it the same accord version?")

    def _expect(self, request: object, what: str, kind: type[R], wait_seconds: float = 0.0) -> R:
        answer = self._call(request, what, wait_seconds)
        if isinstance(answer, p.TimeoutResponse):
            raise StoreTimeoutError(
                f"{self._where()}: {what} timed out after {format_seconds(wait_seconds)} waiting "
                f"for {list(answer.keys)}. Did the rank that should set it reach that point?")
        if not isinstance(answer, kind):
            raise self._unexpected(answer, what)
        return answer

    # -- the operations ---------------------------------------------------------------------
    def set(self, key: str, value: Value) -> None:
        self._expect(p.SetRequest(check_key(key), to_bytes(value)), f"set({key!r})", p.OkResponse)

    def get(self, key: str) -> bytes:
        seconds = self._seconds(None)
        request = p.GetRequest(check_key(key), seconds)
        return self._expect(request, f"get({key!r})", p.ValueResponse, seconds).value

    def add(self, key: str, amount: int) -> int:
        request = p.AddRequest(check_key(key), int(amount))
        return self._expect(request, f"add({key!r})", p.IntResponse).value

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        expected, desired = to_bytes(expected_value), to_bytes(desired_value)
        request = p.CompareSetRequest(check_key(key), expected, desired)
        return self._expect(request, f"compare_set({key!r})", p.ValueResponse).value

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        keys, seconds = tuple(check_keys(keys)), self._seconds(timeout)
        self._expect(p.WaitRequest(keys, seconds), "wait", p.OkResponse, seconds)

    def check(self, keys: Sequence[str]) -> bool:
        request = p.CheckRequest(tuple(check_keys(keys)))
        return self._expect(request, "check", p.BoolResponse).value

    def delete_key(self, key: str) -> bool:
        request = p.DeleteKeyRequest(check_key(key))
        return self._expect(request, f"delete_key({key!r})", p.BoolResponse).value

    def num_keys(self) -> int:
        return self._expect(p.NumKeysRequest(), "num_keys", p.IntResponse).value

    def append(self, key: str, value: Value) -> None:
        request = p.AppendRequest(check_key(key), to_bytes(value))
        self._expect(request, f"append({key!r})", p.OkResponse)

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        keys, seconds = tuple(check_keys(keys)), self._seconds(None)
        request = p.MultiGetRequest(keys, seconds)
        return list(self._expect(request, "multi_get", p.ValuesResponse, seconds).values)

    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        keys = check_keys(keys)
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        request = p.MultiSetRequest(tuple(keys), tuple(to_bytes(v) for v in values))
        self._expect(request, "multi_set", p.OkResponse)

    def queue_push(self, key: str, value: Value) -> None:
        request = p.QueuePushRequest(check_key(key), to_bytes(value))
        self._expect(request, f"queue_push({key!r})", p.OkResponse)

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        seconds = self._seconds(None) if block else 0.0
        request = p.QueuePopRequest(check_key(key), bool(block), seconds)
        return self._expect(request, f"queue_pop({key!r})", p.ValueResponse, seconds).value

    def queue_len(self, key: str) -> int:
        request = p.QueueLenRequest(check_key(key))
        return self._expect(request, f"queue_len({key!r})", p.IntResponse).value

    def list_keys(self) -> list[str]:
        return list(self._expect(p.ListKeysRequest(), "list_keys", p.KeysResponse).keys)

    def clone(self) -> TCPStore:
        """A new connection to the same server (not counted as a worker; never a master)."""
        clone = TCPStore.__new__(TCPStore)
        Store.__init__(clone, self.timeout)
        clone._sock, clone._server, clone._broken = None, None, None
        clone._host, clone._port, clone._world_size = self._host, self._port, self._world_size
        clone._lock, clone._closing, clone._local = threading.Lock(), False, None
        clone._connect(is_worker=False)
        return clone

    def close(self) -> None:
        """Close the connection; on the master also stop the server (when no one shares it).

        A call blocked in another thread on this handle is woken and raises DistStoreError.
        """
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before there was anything to close
            return
        sock = self._sock
        if sock is not None:
            self._closing = True
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on this handle
            except OSError:
                pass
        with lock:
            sock, self._sock = self._sock, None
            server, self._server = self._server, None
        if sock is not None:
            sock.close()
            tcp_server.forget_local_client(self._local)
        if server is not None:
            _release_server(server)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass
