"""The TCPStore server's logic without IO: decoded requests in, reply bytes out.

Owns: what each command of torch's protocol does to one KeyValueTable, with torch's
semantics and reply codes, and the clients parked in WAIT or BARRIER until their keys appear
(or until CANCEL_WAIT, or until they disconnect). Connections are opaque hashable tokens, so
this module knows no sockets, threads or clocks; ``tcp_server`` moves the bytes. Timeouts are
the clients' (torch's protocol carries none): a client that gives up sends CANCEL_WAIT.

Semantics beyond the reply layouts (docs/wire-protocols.md): a name is *present* when it is a
key or a non-empty queue (CHECK and WAIT see both, as torch's server does); GET and MULTI_GET
of a missing key answer an empty value (torch's clients WAIT first); QUEUE_PUSH wakes one
waiter of that name, every other change wakes all of them. A request this server will not run
(ADD on a value that is not an integer, a result beyond 64 bits, a second WAIT while one is
parked) raises Refused: the server then closes that connection, as torch's does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from ..errors import DistStoreError
from . import tcp_protocol as p
from .base import parse_counter
from .kv import KeyValueTable

Reply = tuple[Hashable, bytes]
C = p.Command
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_STOP = p.reply_u8(p.STOP_WAITING)


class Refused(Exception):
    """The server will not run this request; the message says why (for the server's log)."""


@dataclass
class _Waiter:
    """A parked WAIT (``keys``, of which ``missing`` were absent when last looked at) or
    BARRIER (``world_size`` set: wait until the counter under ``keys[0]`` reaches it)."""

    keys: tuple[str, ...]
    missing: set[str] = field(default_factory=set)
    world_size: int | None = None


class StoreEngine:
    """One store's table and parked clients; ``execute`` returns the replies it produced."""

    def __init__(self) -> None:
        self.table = KeyValueTable()
        self._waiting: dict[Hashable, _Waiter] = {}
        self._by_name: dict[str, dict[Hashable, None]] = {}  # name → parked conns, in order
        self._handlers: dict[C, Callable[[Hashable, p.Request, list[Reply]], bytes | None]] = {
            C.VALIDATE: lambda conn, r, out: None,
            C.PING: lambda conn, r, out: p.reply_u32(r.number),
            C.SET: self._set,
            C.COMPARE_SET: self._compare_set,
            C.GET: self._get,
            C.ADD: self._add,
            C.CHECK: self._check,
            C.WAIT: self._wait,
            C.GETNUMKEYS: lambda conn, r, out: p.reply_i64(self.table.num_keys()),
            C.DELETE_KEY: lambda conn, r, out: p.reply_i64(int(self.table.delete(r.keys[0]))),
            C.APPEND: self._append,
            C.MULTI_GET: self._multi_get,
            C.MULTI_SET: self._multi_set,
            C.CANCEL_WAIT: self._cancel_wait,
            C.QUEUE_PUSH: self._queue_push,
            C.QUEUE_POP: self._queue_pop,
            C.QUEUE_LEN: lambda conn, r, out: p.reply_i64(self.table.queue_len(r.keys[0])),
            C.LIST_KEYS: lambda conn, r, out: p.reply_key_list(list(self.table.data)),
            C.BARRIER: self._barrier,
        }

    # -- the interface the server uses ------------------------------------------------------
    def execute(self, conn: Hashable, request: p.Request) -> list[Reply]:
        """Run one request from ``conn``: its reply first (if it has one), then the replies of
        the clients it woke. Raises Refused (nothing was changed)."""
        replies: list[Reply] = []
        answer = self._handlers[request.command](conn, request, replies)
        if answer is not None:
            replies.insert(0, (conn, answer))
        return replies

    def disconnect(self, conn: Hashable) -> None:
        """Forget ``conn``: a parked request of its is dropped."""
        self._unpark(conn)

    @property
    def num_parked(self) -> int:
        return len(self._waiting)

    # -- commands ---------------------------------------------------------------------------
    def _set(self, conn: Hashable, r: p.Request, out: list[Reply]) -> None:
        self.table.set(r.keys[0], r.values[0])
        self._changed(r.keys[0], out)

    def _compare_set(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        result = self.table.compare_set(r.keys[0], r.values[0], r.values[1])
        self._changed(r.keys[0], out)
        return p.string(result)

    def _get(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        return p.string(self.table.data.get(r.keys[0], b""))

    def _add(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        total = self._counter(r.keys[0]) + r.number
        if not _I64_MIN <= total <= _I64_MAX:
            raise Refused(f"add({r.keys[0]!r}, {r.number}) would leave {total}, beyond 64 bits")
        self.table.set(r.keys[0], str(total).encode("ascii"))
        self._changed(r.keys[0], out)
        return p.reply_i64(total)

    def _check(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        return p.reply_u8(p.READY if all(map(self._present, r.keys)) else p.NOT_READY)

    def _wait(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes | None:
        self._refuse_second_wait(conn, "WAIT")
        missing = {key for key in r.keys if not self._present(key)}
        if not missing:
            return _STOP
        self._park(conn, _Waiter(r.keys, missing))
        return None

    def _append(self, conn: Hashable, r: p.Request, out: list[Reply]) -> None:
        self.table.append(r.keys[0], r.values[0])
        self._changed(r.keys[0], out)

    def _multi_get(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        data = self.table.data
        return p.reply_strings([data.get(key, b"") for key in r.keys])

    def _multi_set(self, conn: Hashable, r: p.Request, out: list[Reply]) -> None:
        self.table.multi_set(r.keys, r.values)
        for key in dict.fromkeys(r.keys):
            self._changed(key, out)

    def _cancel_wait(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        self._unpark(conn)
        return p.reply_u8(p.WAIT_CANCELED)

    def _queue_push(self, conn: Hashable, r: p.Request, out: list[Reply]) -> None:
        self.table.queue_push(r.keys[0], r.values[0])
        self._changed(r.keys[0], out, wake_one=True)

    def _queue_pop(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes:
        length = self.table.queue_len(r.keys[0])
        return p.reply_popped(self.table.queue_pop(r.keys[0]) if length else None, length)

    def _barrier(self, conn: Hashable, r: p.Request, out: list[Reply]) -> bytes | None:
        self._refuse_second_wait(conn, "BARRIER")
        key = r.keys[0]
        count = self._counter(key) + 1
        self.table.set(key, str(count).encode("ascii"))
        self._changed(key, out)
        if count >= r.number:
            return _STOP
        self._park(conn, _Waiter((key,), {key}, r.number))
        return None

    # -- helpers ----------------------------------------------------------------------------
    def _present(self, name: str) -> bool:
        return name in self.table.data or name in self.table.queues

    def _counter(self, key: str) -> int:
        value = self.table.data.get(key)
        if value is None:
            return 0
        try:
            return parse_counter(key, value)
        except DistStoreError as exc:
            raise Refused(str(exc)) from None

    def _reached(self, waiter: _Waiter, name: str) -> bool:
        """Whether the change of ``name`` satisfies this part of ``waiter``'s wait."""
        if waiter.world_size is None:
            return self._present(name)
        value = self.table.data.get(name)
        try:
            return value is not None and parse_counter(name, value) >= waiter.world_size
        except DistStoreError:
            return False

    def _refuse_second_wait(self, conn: Hashable, command: str) -> None:
        if conn in self._waiting:
            raise Refused(
                f"{command} while an earlier WAIT or BARRIER of the same connection "
                f"is still waiting (torch's clients send CANCEL_WAIT first)"
            )

    def _park(self, conn: Hashable, waiter: _Waiter) -> None:
        self._waiting[conn] = waiter
        for name in waiter.missing:
            self._by_name.setdefault(name, {})[conn] = None

    def _unpark(self, conn: Hashable) -> None:
        waiter = self._waiting.pop(conn, None)
        if waiter is None:
            return
        for name in waiter.missing:
            parked = self._by_name.get(name)
            if parked is not None:
                parked.pop(conn, None)
                if not parked:
                    del self._by_name[name]

    def _changed(self, name: str, out: list[Reply], wake_one: bool = False) -> None:
        """``name`` was written: answer the parked clients this completes (the first one
        only, with ``wake_one``)."""
        parked = self._by_name.get(name)
        if not parked:
            return
        for conn in list(parked):
            waiter = self._waiting[conn]
            if not self._reached(waiter, name):
                continue
            del parked[conn]
            waiter.missing.discard(name)
            if waiter.missing:
                continue
            gone = {key for key in waiter.keys if not self._reached(waiter, key)}
            if gone:  # deleted since it was seen: wait for it again
                waiter.missing = gone
                for key in gone:
                    self._by_name.setdefault(key, {})[conn] = None
                continue
            del self._waiting[conn]
            out.append((conn, _STOP))
            if wake_one:
                break
        if not parked:
            self._by_name.pop(name, None)
