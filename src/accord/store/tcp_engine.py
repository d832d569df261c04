"""The TCPStore server's logic without IO: requests in, responses out, waiting requests parked.

Owns: executing decoded requests against one KeyValueTable in order per connection, parking
the ones that must wait (get, wait, multi_get, blocking queue_pop, wait_for_workers) until
their keys appear or their timeout passes, and counting workers. Connections are opaque
hashable tokens and time is a number passed in, so this module knows no sockets, threads or
clocks; ``tcp_server`` moves the bytes.

Ordering: a connection's requests run one at a time in arrival order. While one is parked,
the ones behind it wait in that connection's inbox, so each client sees its answers in order.
Blocking queue pops are served first come, first served.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Hashable, Optional

from ..errors import DistStoreError, QueueEmptyError
from . import tcp_protocol as p
from .kv import KeyValueTable

Reply = tuple[Hashable, object]

_PARKABLE = (p.GetRequest, p.WaitRequest, p.MultiGetRequest, p.QueuePopRequest,
             p.WaitWorkersRequest)


class QueueKey(str):
    """Marks a changed name as a queue rather than a key (for waking waiters)."""


#: Marks "the number of workers changed" (for waking wait_for_workers).
WORKERS = object()


def _keys_of(request: object) -> tuple[str, ...]:
    """The keys a GET, WAIT or MULTI_GET waits for."""
    if isinstance(request, p.GetRequest):
        return (request.key,)
    return request.keys  # type: ignore[attr-defined]


@dataclass
class _Parked:
    request: object
    token: int


class StoreEngine:
    """One store's table and waiters; every method returns the replies it produced."""

    def __init__(self) -> None:
        self.table = KeyValueTable()
        self.workers_joined = 0
        self._inbox: dict[Hashable, deque[object]] = {}
        self._parked: dict[Hashable, _Parked] = {}
        self._key_waiters: dict[str, set[Hashable]] = {}
        self._queue_waiters: dict[str, deque[Hashable]] = {}
        self._worker_waiters: set[Hashable] = set()
        self._deadlines: list[tuple[float, int, Hashable]] = []
        self._tokens = itertools.count()

    # -- the interface the server uses ------------------------------------------------------
    def submit(self, conn: Hashable, request: object, now: float) -> list[Reply]:
        """Queue ``request`` from ``conn`` and run whatever can run now."""
        self._inbox.setdefault(conn, deque()).append(request)
        replies: list[Reply] = []
        self._run([conn], now, replies)
        return replies

    def expire(self, now: float) -> list[Reply]:
        """Answer every parked request whose timeout has passed by ``now``."""
        replies: list[Reply] = []
        released = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, token, conn = heapq.heappop(self._deadlines)
            parked = self._parked.get(conn)
            if parked is not None and parked.token == token:
                self._unpark(conn)
                replies.append((conn, self._timed_out(parked.request)))
                released.append(conn)
        self._run(released, now, replies)
        return replies

    def next_deadline(self) -> float | None:
        """When ``expire`` next has work, or None; stale entries are dropped here."""
        while self._deadlines:
            _, token, conn = self._deadlines[0]
            parked = self._parked.get(conn)
            if parked is not None and parked.token == token:
                return self._deadlines[0][0]
            heapq.heappop(self._deadlines)
        return None

    def disconnect(self, conn: Hashable) -> None:
        """Forget ``conn``: its queued and parked requests are dropped unanswered."""
        self._inbox.pop(conn, None)
        if conn in self._parked:
            self._unpark(conn)

    @property
    def num_parked(self) -> int:
        return len(self._parked)

    # -- running requests -------------------------------------------------------------------
    def _run(self, conns: list[Hashable], now: float, replies: list[Reply]) -> None:
        runnable = deque(conns)
        while runnable:
            conn = runnable.popleft()
            inbox = self._inbox.get(conn)
            while inbox and conn not in self._parked:
                request = inbox.popleft()
                runnable.extend(self._execute(conn, request, now, replies))

    def _execute(self, conn: Hashable, request: object, now: float,
                 replies: list[Reply]) -> list[Hashable]:
        """Run one request; returns the connections it un-parked (their replies are added)."""
        if isinstance(request, _PARKABLE):
            answer = self._try(request)
            if answer is not None:
                replies.append((conn, answer))
            elif isinstance(request, p.QueuePopRequest) and not request.block:
                replies.append((conn, p.ErrorResponse(
                    p.ERR_QUEUE_EMPTY, f"queue_pop({request.key!r}): the queue is empty")))
            elif request.timeout <= 0:
                replies.append((conn, self._timed_out(request)))
            else:
                self._park(conn, request, now + request.timeout)
            return []
        try:
            answer, woken = self._mutate_or_read(request)
        except DistStoreError as exc:
            replies.append((conn, p.ErrorResponse(p.ERR_STORE, str(exc))))
            return []
        replies.append((conn, answer))
        return self._wake(woken, replies)

    def _mutate_or_read(self, r: object) -> tuple[object, Optional[object]]:
        """Answer a request that never waits; second item: what it changed (for waiters)."""
        t, ok = self.table, p.OkResponse()
        if isinstance(r, p.SetRequest):
            t.set(r.key, r.value)
            return ok, (r.key,)
        if isinstance(r, p.AddRequest):
            return p.IntResponse(t.add(r.key, r.amount)), (r.key,)
        if isinstance(r, p.CompareSetRequest):
            return p.ValueResponse(t.compare_set(r.key, r.expected, r.desired)), (r.key,)
        if isinstance(r, p.AppendRequest):
            t.append(r.key, r.value)
            return ok, (r.key,)
        if isinstance(r, p.MultiSetRequest):
            t.multi_set(r.keys, r.values)
            return ok, r.keys
        if isinstance(r, p.QueuePushRequest):
            t.queue_push(r.key, r.value)
            return ok, QueueKey(r.key)
        if isinstance(r, p.Hello):
            self.workers_joined += 1 if r.is_worker else 0
            return ok, WORKERS if r.is_worker else None
        return self._read(r), None

    def _read(self, r: object) -> object:
        t = self.table
        if isinstance(r, p.CheckRequest):
            return p.BoolResponse(not t.missing(r.keys))
        if isinstance(r, p.DeleteKeyRequest):
            return p.BoolResponse(t.delete(r.key))
        if isinstance(r, p.NumKeysRequest):
            return p.IntResponse(t.num_keys())
        if isinstance(r, p.QueueLenRequest):
            return p.IntResponse(t.queue_len(r.key))
        if isinstance(r, p.ListKeysRequest):
            return p.KeysResponse(tuple(t.list_keys()))
        return p.ErrorResponse(p.ERR_INTERNAL, f"the server cannot run {type(r).__name__}")

    def _try(self, r: object) -> object | None:
        """The answer to a waiting request if it is ready now, else None."""
        t = self.table
        if isinstance(r, p.WaitWorkersRequest):
            return p.IntResponse(self.workers_joined) if self.workers_joined >= r.count else None
        if isinstance(r, p.QueuePopRequest):
            try:
                return p.ValueResponse(t.queue_pop(r.key))
            except QueueEmptyError:
                return None
        keys = _keys_of(r)
        if t.missing(keys):
            return None
        if isinstance(r, p.WaitRequest):
            return p.OkResponse()
        if isinstance(r, p.GetRequest):
            return p.ValueResponse(t.data[r.key])
        return p.ValuesResponse(tuple(t.data[k] for k in keys))

    def _timed_out(self, r: object) -> object:
        if isinstance(r, p.WaitWorkersRequest):
            return p.IntResponse(self.workers_joined)
        if isinstance(r, (p.GetRequest, p.QueuePopRequest)):
            return p.TimeoutResponse((r.key,))
        return p.TimeoutResponse(tuple(self.table.missing(_keys_of(r))))

    # -- parking ----------------------------------------------------------------------------
    def _park(self, conn: Hashable, request: object, deadline: float) -> None:
        token = next(self._tokens)
        self._parked[conn] = _Parked(request, token)
        heapq.heappush(self._deadlines, (deadline, token, conn))
        if isinstance(request, p.WaitWorkersRequest):
            self._worker_waiters.add(conn)
        elif isinstance(request, p.QueuePopRequest):
            self._queue_waiters.setdefault(request.key, deque()).append(conn)
        else:
            for key in _keys_of(request):
                self._key_waiters.setdefault(key, set()).add(conn)

    def _unpark(self, conn: Hashable) -> None:
        request = self._parked.pop(conn).request
        if isinstance(request, p.WaitWorkersRequest):
            self._worker_waiters.discard(conn)
        elif isinstance(request, p.QueuePopRequest):
            waiters = self._queue_waiters[request.key]
            waiters.remove(conn)
            if not waiters:
                del self._queue_waiters[request.key]
        else:
            for key in _keys_of(request):
                waiters = self._key_waiters.get(key)
                if waiters is not None:
                    waiters.discard(conn)
                    if not waiters:
                        del self._key_waiters[key]

    def _wake(self, changed: object, replies: list[Reply]) -> list[Hashable]:
        """Answer the parked requests that ``changed`` satisfies; returns their connections."""
        if changed is None:
            return []
        if changed is WORKERS:
            candidates = list(self._worker_waiters)
        elif isinstance(changed, QueueKey):
            candidates = list(self._queue_waiters.get(changed, ()))
        else:
            waiting = self._key_waiters
            candidates = list(dict.fromkeys(c for k in changed for c in waiting.get(k, ())))
        woken = []
        for conn in candidates:
            answer = self._try(self._parked[conn].request)
            if answer is not None:
                self._unpark(conn)
                replies.append((conn, answer))
                woken.append(conn)
        return woken
