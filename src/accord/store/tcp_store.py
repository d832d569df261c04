"""TCPStore: torch.distributed.TCPStore — a client, and on the master also the server.

Owns: the Store operations in terms of torch's TCPStore protocol, as torch's C++ client sends
them (keys get a "/" prefix on the wire; ``get`` is WAIT then GET; timeouts are the client's,
ended by CANCEL_WAIT; ``wait_for_workers`` adds 1 under "init/" and the master polls it), so
that accord's and torch's clients and servers mix freely; and errors that name the cause.
The connection is ``tcp_client``'s, the bytes ``tcp_protocol``'s, the server ``tcp_server``'s
(and which master gets which server ``tcp_servers``'s). Must not know ranks or transports.

Threads: a TCPStore may be used from several threads; their operations take turns on the one
connection, so a blocking ``get`` holds up the other threads' calls until it returns. A thread
that blocks for long should use its own connection: ``clone()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TypeVar

from ..errors import DistStoreError, ProtocolError, QueueEmptyError, StoreTimeoutError
from ..timeouts import Deadline, format_seconds
from . import tcp_protocol as p
from . import tcp_server, tcp_servers
from .base import Store, Value, check_keys, to_bytes
from .tcp_client import ClientConnection, Lost, TimedOut, missing, refusal, wire_key

R = TypeVar("R")
C = p.Command

#: Extra time a reply may take beyond the store's timeout before the client gives up.
_REPLY_GRACE_S = 10.0
#: The key under which ``wait_for_workers`` counts the stores that joined (torch's, no prefix).
_INIT_KEY = "init/"
_POLL_S = 0.01


class TCPStore(Store):
    """A store served over TCP by the master process (torch.distributed.TCPStore).

    Args, as torch's: ``host_name``/``port`` of the server (the master binds every interface,
    or only loopback when ``host_name`` is a loopback address; port 0 picks a free one, see
    ``port``); ``world_size`` processes expected; ``is_master``
    starts the server in this process (and connects to it); ``timeout`` bounds connecting and
    every waiting operation; with ``wait_for_workers`` and a ``world_size`` each store adds 1
    under the key "init/" and the master's constructor returns only once ``world_size`` have
    (itself included; this key counts in ``num_keys``, as on torch); ``multi_tenant`` masters
    of one process share one server per port; ``master_listen_fd`` is an already bound socket
    for the server (the store takes the descriptor over); ``use_libuv`` is accepted and
    ignored. The server may be accord's or torch's (libuv or legacy), and so may the clients.
    """

    def __init__(
        self,
        host_name: str,
        port: int,
        world_size: int | None = None,
        is_master: bool = False,
        timeout: timedelta = timedelta(seconds=300),
        wait_for_workers: bool = True,
        multi_tenant: bool = False,
        master_listen_fd: int | None = None,
        use_libuv: bool = True,
    ) -> None:
        super().__init__(timeout)
        self._conn: ClientConnection | None = None
        self._server: tcp_server.TCPStoreServer | None = None
        self._host, self._port, self._world_size = host_name, int(port), world_size
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._closing = False
        self._unanswered: str | None = None  # the last request sent that has no reply
        if is_master:
            self._server = tcp_servers.acquire(self._port, multi_tenant, master_listen_fd, host_name)
            self._port = self._server.port
        try:
            self._conn = ClientConnection(host_name, self._port, self._seconds(None))
            if wait_for_workers and world_size is not None:
                self._wait_for_workers(world_size, is_master)
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
            return self._require("local_address").local_address()

    # -- exchanges --------------------------------------------------------------------------
    def _where(self) -> str:
        return f"TCPStore {self._host}:{self._port}"

    def _require(self, what: str) -> ClientConnection:
        if self._broken is not None:
            raise DistStoreError(
                f"{self._where()}: {what}: the connection broke earlier "
                f"({self._broken}); create a new TCPStore."
            )
        if self._conn is None or self._conn.sock is None:
            raise DistStoreError(f"{self._where()}: {what} on a closed TCPStore; create a new one.")
        return self._conn

    def _exchange(self, what: str, run: Callable[[ClientConnection, Deadline], R]) -> R:
        """``run(conn, reply_deadline)`` under the lock, its failures turned into errors."""
        with self._lock:
            conn = self._require(what)
            try:
                return run(conn, Deadline.after(self._seconds(None) + _REPLY_GRACE_S))
            except TimeoutError:  # socket.timeout: no reply at all
                self._broken = f"no reply to {what} in time"
                raise StoreTimeoutError(
                    f"{self._where()}: {self._broken}. Is the server process (rank 0) overloaded or frozen?"
                ) from None
            except ProtocolError as exc:
                self._broken = str(exc)
                raise DistStoreError(
                    f"{self._where()}: the server's reply to {what} breaks torch's TCPStore "
                    f"protocol ({exc}). Is another program listening on that port?"
                ) from exc
            except Lost as exc:
                raise self._lost(conn, what, str(exc)) from None

    def _lost(self, conn: ClientConnection, what: str, why: str) -> DistStoreError:
        earlier, self._unanswered = self._unanswered, None
        if self._closing:
            self._broken = why
            return DistStoreError(
                f"{self._where()}: {what} was interrupted because another thread closed this TCPStore."
            )
        # A request without a reply is refused silently; of those, the client checked the
        # limits of all, so only a queue_push (to torch's legacy server) can be the culprit.
        earlier = earlier if earlier and earlier.startswith("queue_") else None
        if conn.reopen():
            hints = "; or ".join(dict.fromkeys(refusal(op) for op in (what, earlier) if op))
            also = f" (or the earlier {earlier}, which has no reply)" if earlier else ""
            return DistStoreError(
                f"{self._where()}: the server closed the connection during {what}{also} but is "
                f"still up, so it refused the request: likely {hints}. Its log says why. This "
                f"TCPStore has reconnected and can be used again."
            )
        self._broken = why
        return DistStoreError(
            f"{self._where()}: lost the connection to the server during "
            f"{what} ({why}). Did rank 0, which runs the store, exit or crash?"
        )

    def _send(self, what: str, data: bytes) -> None:
        """A request without a reply: a refusal shows at the next exchange."""

        def run(conn: ClientConnection, deadline: Deadline) -> None:
            conn.send(data)

        self._exchange(what, run)
        self._unanswered = what

    def _ask(self, what: str, data: bytes, read: Callable[[Callable[[int], bytes]], R]) -> R:
        """A request and its reply, read by ``read(read_exact)``."""

        def run(conn: ClientConnection, deadline: Deadline) -> R:
            conn.send(data)
            return read(lambda n: conn.read(n, deadline))

        result = self._exchange(what, run)
        self._unanswered = None
        return result

    def _await(
        self,
        what: str,
        keys: list[bytes],
        seconds: float,
        then: bytes | None = None,
        read: Callable[[Callable[[int], bytes]], R] | None = None,
        barrier: int | None = None,
    ) -> R | None:
        """WAIT for ``keys`` (or BARRIER on ``keys[0]`` for ``barrier`` callers) up to
        ``seconds`` (StoreTimeoutError after), then send ``then`` and return what ``read``
        makes of its reply. A WAIT of zero seconds is a CHECK: it never parks."""

        def run(conn: ClientConnection, deadline: Deadline) -> R | TimedOut | None:
            if barrier is not None:
                conn.send(p.request(C.BARRIER, keys=keys, number=barrier))
                arrived = conn.await_stop(seconds)
            elif seconds <= 0:
                conn.send(p.request(C.CHECK, keys=keys))
                arrived = p.read_u8(lambda n: conn.read(n, deadline)) == p.READY
            else:
                conn.send(p.request(C.WAIT, keys=keys))
                arrived = conn.await_stop(seconds)
            reply = Deadline.after(deadline.budget)  # counted from now, after the wait
            if not arrived:
                return TimedOut(missing(conn, keys, reply) if barrier is None else keys)
            if then is None or read is None:
                return None
            conn.send(then)
            return read(lambda n: conn.read(n, reply))

        result = self._exchange(what, run)
        self._unanswered = None
        if isinstance(result, TimedOut):
            names = [p.key_text(key[1:] if key.startswith(b"/") else key) for key in result.keys]
            raise StoreTimeoutError(
                f"{self._where()}: {what} timed out after {format_seconds(seconds)} waiting for "
                f"{names}. Did the rank that should set it (or reach the barrier) get that far?"
            )
        return result

    # -- the operations ---------------------------------------------------------------------
    def set(self, key: str, value: Value) -> None:
        wire, data = wire_key(key), to_bytes(value)
        p.check_limits([wire], [data], f"set({key!r})")
        self._send(f"set({key!r})", p.request(C.SET, keys=[wire], values=[data]))

    def get(self, key: str) -> bytes:
        wire, seconds = wire_key(key), self._seconds(None)
        p.check_limits([wire], [], f"get({key!r})")
        return self._await(
            f"get({key!r})",
            [wire],
            seconds,  # type: ignore[return-value]
            p.request(C.GET, keys=[wire]),
            p.read_string,
        )

    def add(self, key: str, amount: int) -> int:
        wire = wire_key(key)
        p.check_limits([wire], [], f"add({key!r})")
        return self._add_raw(wire, int(amount), f"add({key!r})")

    def _add_raw(self, wire: bytes, amount: int, what: str) -> int:
        if not -(1 << 63) <= amount < (1 << 63):
            raise ValueError(f"{what}: {amount} does not fit in 64 bits")
        return self._ask(what, p.request(C.ADD, keys=[wire], number=amount), p.read_i64)

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        wire, expected, desired = wire_key(key), to_bytes(expected_value), to_bytes(desired_value)
        p.check_limits([wire], [expected, desired], f"compare_set({key!r})")
        data = p.request(C.COMPARE_SET, keys=[wire], values=[expected, desired])
        return self._ask(f"compare_set({key!r})", data, p.read_string)

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        wires = [wire_key(k) for k in check_keys(keys)]
        p.check_limits(wires, [], "wait")
        self._await(f"wait({list(keys)!r})", wires, self._seconds(timeout))

    def check(self, keys: Sequence[str]) -> bool:
        wires = [wire_key(k) for k in check_keys(keys)]
        p.check_limits(wires, [], "check")
        return self._ask("check", p.request(C.CHECK, keys=wires), p.read_u8) == p.READY

    def delete_key(self, key: str) -> bool:
        wire = wire_key(key)
        p.check_limits([wire], [], f"delete_key({key!r})")
        return self._ask(f"delete_key({key!r})", p.request(C.DELETE_KEY, keys=[wire]), p.read_i64) == 1

    def num_keys(self) -> int:
        """Every key on the server, as torch counts them ("init/" of wait_for_workers too)."""
        return self._ask("num_keys", p.request(C.GETNUMKEYS), p.read_i64)

    def append(self, key: str, value: Value) -> None:
        wire, data = wire_key(key), to_bytes(value)
        p.check_limits([wire], [data], f"append({key!r})")
        self._send(f"append({key!r})", p.request(C.APPEND, keys=[wire], values=[data]))

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        wires = [wire_key(k) for k in check_keys(keys)]
        p.check_limits(wires, [], "multi_get")
        return self._await(  # type: ignore[return-value]
            f"multi_get({list(keys)!r})",
            wires,
            self._seconds(None),
            p.request(C.MULTI_GET, keys=wires),
            lambda read: [p.read_string(read) for _ in wires],
        )

    def multi_set(self, keys: Sequence[str], values: Sequence[Value]) -> None:
        checked = check_keys(keys)
        if len(checked) != len(values):
            raise ValueError(f"multi_set: {len(checked)} keys but {len(values)} values")
        wires, data = [wire_key(k) for k in checked], [to_bytes(v) for v in values]
        p.check_limits(wires, data, "multi_set")
        self._send("multi_set", p.request(C.MULTI_SET, keys=wires, values=data))

    def queue_push(self, key: str, value: Value) -> None:
        wire, data = wire_key(key), to_bytes(value)
        p.check_limits([wire], [data], f"queue_push({key!r})")
        self._send(f"queue_push({key!r})", p.request(C.QUEUE_PUSH, keys=[wire], values=[data]))

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        wire, what = wire_key(key), f"queue_pop({key!r})"
        p.check_limits([wire], [], what)
        pop = p.request(C.QUEUE_POP, keys=[wire])
        if not block:
            value = self._ask(what, pop, p.read_popped)
        else:
            deadline = Deadline.after(self._seconds(None))
            value = None
            while value is None:  # another client may pop first: wait again
                value = self._await(what, [wire], deadline.remaining(), pop, p.read_popped)
        if value is None:
            raise QueueEmptyError(f"{self._where()}: {what}: the queue is empty")
        return value

    def queue_len(self, key: str) -> int:
        wire = wire_key(key)
        p.check_limits([wire], [], f"queue_len({key!r})")
        return self._ask(f"queue_len({key!r})", p.request(C.QUEUE_LEN, keys=[wire]), p.read_i64)

    def list_keys(self) -> list[str]:
        """The keys set through TCPStore clients (torch's or accord's), sorted."""
        raw = self._ask("list_keys", p.request(C.LIST_KEYS), p.read_key_list)
        return sorted(key[1:] for key in raw if key.startswith("/"))

    def barrier(self, key: str, world_size: int, timeout: timedelta | None = None) -> None:
        """Wait until ``world_size`` callers have called ``barrier`` with this ``key`` (one
        BARRIER request, as torch's client)."""
        wire = wire_key(key)
        p.check_limits([wire], [], f"barrier({key!r})")
        self._await(
            f"barrier({key!r}, {world_size})", [wire], self._seconds(timeout), barrier=int(world_size)
        )

    def _wait_for_workers(self, world_size: int, is_master: bool) -> None:
        """torch's way: every store adds 1 under "init/"; the master polls until all have."""
        self._add_raw(_INIT_KEY.encode(), 1, "wait_for_workers")
        deadline = Deadline.after(self._seconds(None))
        while is_master:
            init = [_INIT_KEY.encode()]
            joined = int(
                self._await(
                    "wait_for_workers",
                    init,
                    deadline.remaining(),  # type: ignore[arg-type]
                    p.request(C.GET, keys=init),
                    p.read_string,
                )
            )
            if joined >= world_size:
                return
            if deadline.expired():
                raise StoreTimeoutError(
                    f"TCPStore master on port {self._port}: {joined} of {world_size} workers "
                    f"joined within {format_seconds(deadline.budget)} (the master included). "
                    f"Did every rank start, with MASTER_ADDR={self._host} and "
                    f"MASTER_PORT={self._port}?"
                )
            time.sleep(_POLL_S)

    def clone(self) -> TCPStore:
        """A new connection to the same server (it adds nothing to "init/"; never a master)."""
        return TCPStore(self._host, self._port, None, False, self.timeout, wait_for_workers=False)

    def close(self) -> None:
        """Close the connection; on the master also retire the server (when no other master
        shares it): it serves other processes' clients still connected, in the background,
        until they leave or ACCORD_STORE_EXIT_GRACE seconds pass (at exit the process waits).

        A call blocked in another thread on this handle is woken and raises DistStoreError.
        """
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before there was anything to close
            return
        conn = self._conn
        if conn is not None:
            self._closing = True
            conn.interrupt()
        with lock:
            conn, self._conn = self._conn, None
            server, self._server = self._server, None
        if conn is not None:
            conn.close()
        if server is not None:
            tcp_servers.release(server)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass
