"""Real OS processes for the multi-process tests: the children's code and the parent's handle.

Children are started with multiprocessing's "spawn" context, so everything they run lives here
(importable as ``processes.procs``: spawn hands the parent's ``sys.path``, which
tests/conftest.py extends with the tests directory, to each child).

A child runs ``child_main``: it imports accord, reports "ready", waits for the parent's "go"
(so every rank starts its rendezvous at the same moment, whatever spawning cost), then runs one
scenario function. Everything a child has to say goes through its own Queue as a ``Report``
``(rank, key, type_name, message, info)``: ``type_name`` is "ok" for a success, else the
exception's class name (``info["mro"]`` lists its bases so the parent can check that a
PeerError is also a ConnectionError). One queue per child, not one shared: a queue's writers
share a lock, and a child SIGKILLed while its feeder thread holds it (waiting for the GIL to
release it) would silence every other child. Timings in ``info`` are ``time.monotonic`` durations
(``elapsed``) or ``time.time`` instants (``at``), comparable with the parent's ``time.time``.

A scenario that must not exit before the parent allows it (its store or sockets are still
needed by the others) waits for the "release" event; the parent sets it once it has read
everything it wants.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import signal
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, NamedTuple

WAIT_S = 60.0  # longest any child waits for the parent's events
EVENTS = ("go", "proceed", "release")


class Report(NamedTuple):
    rank: int
    key: str
    type_name: str
    message: str
    info: dict

    @property
    def ok(self) -> bool:
        return self.type_name == "ok"

    def is_a(self, name: str) -> bool:
        return name in self.info.get("mro", ())


def free_port() -> int:
    """A port that was free a moment ago (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# the child side
# ---------------------------------------------------------------------------------------------
class Ctx:
    """What a scenario function gets: its rank, the world size, and ways to talk to the parent."""

    def __init__(self, rank: int, world_size: int, results: Any, events: dict[str, Any]) -> None:
        self.rank = rank
        self.world_size = world_size
        self._results = results
        self._events = events

    def report(self, key: str, exc: BaseException | None = None, **info: Any) -> None:
        if exc is None:
            self._results.put(Report(self.rank, key, "ok", "", info))
            return
        info["mro"] = [cls.__name__ for cls in type(exc).__mro__]
        info["peer"] = getattr(exc, "peer", None)
        self._results.put(Report(self.rank, key, type(exc).__name__, str(exc), info))

    def attempt(self, key: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Run ``func``; report how it went as ``key`` with its duration; True if it returned."""
        start = time.monotonic()
        try:
            func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 — reported to the parent, which judges it
            self.report(key, exc, elapsed=time.monotonic() - start, at=time.time())
            return False
        self.report(key, elapsed=time.monotonic() - start, at=time.time())
        return True

    def wait_for(self, event: str, timeout: float = WAIT_S) -> None:
        if not self._events[event].wait(timeout):
            raise RuntimeError(f"rank {self.rank}: the parent never set {event!r}")

    def flush(self) -> None:
        """Make sure every report reached the pipe (before os._exit or a kill)."""
        self._results.close()
        self._results.join_thread()


def child_main(scenario: str, rank: int, world_size: int, params: dict, results: Any,
               events: dict[str, Any]) -> None:
    ctx = Ctx(rank, world_size, results, events)
    try:
        import numpy  # noqa: F401 — imported before "ready" so that it costs no init time

        import accord  # noqa: F401

        ctx.report("ready", pid=os.getpid())
        ctx.wait_for("go")
        SCENARIOS[scenario](ctx, **params)
    except BaseException as exc:  # noqa: BLE001 — anything unplanned goes to the parent
        ctx.report("uncaught", exc, traceback=traceback.format_exc())
    finally:
        ctx.flush()


def _init(ctx: Ctx, kind: str, timeout: float = 60.0, **where: Any) -> Any:
    """init_process_group through one of the four ways in; returns the store we made, if any."""
    import accord as dist
    from accord import TCPStore

    rank, size, delta = ctx.rank, ctx.world_size, timedelta(seconds=timeout)
    if kind == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(where["port"]),
                          RANK=str(rank), WORLD_SIZE=str(size))
        dist.init_process_group("gloo", timeout=delta)
    elif kind == "tcp":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{where['port']}",
                                rank=rank, world_size=size, timeout=delta)
    elif kind == "file":
        dist.init_process_group("gloo", init_method=f"file://{where['path']}", rank=rank,
                                world_size=size, timeout=delta)
    elif kind == "store":
        store = TCPStore("127.0.0.1", where["port"], world_size=size, is_master=rank == 0,
                         timeout=delta, wait_for_workers=False)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=delta)
        return store
    else:
        raise ValueError(f"unknown init kind {kind!r}")
    return None


# -- scenarios --------------------------------------------------------------------------------
def exercise(rank: int, n: int) -> dict:
    """all_reduce, broadcast, barrier, send/recv with closed-form results (asserted here)."""
    import numpy as np
    from numpy.testing import assert_array_equal

    import accord as dist

    assert dist.get_rank() == rank and dist.get_world_size() == n
    triangle = n * (n - 1) // 2
    x = np.arange(7, dtype=np.int64) + rank
    dist.all_reduce(x)
    assert_array_equal(x, n * np.arange(7) + triangle)
    y = np.full(3, rank + 1, dtype=np.float32)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    assert_array_equal(y, np.full(3, n, dtype=np.float32))
    big = (np.arange(300_000) % 97 + rank).astype(np.float32)  # 1.2 MB: the ring algorithm
    dist.all_reduce(big)
    assert_array_equal(big, (n * (np.arange(300_000) % 97) + triangle).astype(np.float32))
    for src in range(n):
        b = np.full(5, rank, dtype=np.int32)
        dist.broadcast(b, src=src)
        assert_array_equal(b, np.full(5, src, dtype=np.int32))
    wide = np.arange(200_000, dtype=np.float64) * (rank == n - 1)  # large: pipelined broadcast
    dist.broadcast(wide, src=n - 1)
    assert_array_equal(wide, np.arange(200_000, dtype=np.float64))
    dist.barrier()
    if n > 1:
        right, left = (rank + 1) % n, (rank - 1) % n
        out = np.full(4, 10 * rank, dtype=np.int64)
        got = np.zeros(4, dtype=np.int64)
        work = dist.isend(out, dst=right, tag=3)
        assert dist.recv(got, src=left, tag=3) == left
        work.wait()
        assert_array_equal(got, np.full(4, 10 * left))
        if rank == 0:  # any-source receive: everyone else sends rank 0 its rank
            senders = set()
            for _ in range(n - 1):
                one = np.zeros(1, dtype=np.int64)
                sender = dist.recv(one, tag=9)
                assert one[0] == sender
                senders.add(sender)
            assert senders == set(range(1, n))
        else:
            dist.send(np.array([rank], dtype=np.int64), dst=0, tag=9)
    dist.barrier()
    return {"rank": dist.get_rank(), "size": dist.get_world_size()}


def collectives(ctx: Ctx, rounds: list[dict]) -> None:
    """Init, exercise, destroy, once per round, in the same process."""
    import accord as dist

    for i, spec in enumerate(rounds):
        store = _init(ctx, **spec)
        ctx.report(f"round{i}", **exercise(ctx.rank, ctx.world_size))
        dist.destroy_process_group()
        assert not dist.is_initialized()
        if store is not None:  # ours to close; nobody needs it after init (and the collectives
            store.close()      # above prove that every rank got through init)
    ctx.report("done")


def init_only(ctx: Ctx, spec: dict, delays: dict[int, float] | None = None) -> None:
    """Try to init (some ranks never come; some start late); report the outcome; stay until
    released (so a store we host stays up while the others still wait)."""
    import accord as dist

    time.sleep((delays or {}).get(ctx.rank, 0.0))
    if ctx.attempt("init", _init, ctx, **spec):
        dist.destroy_process_group()
    ctx.wait_for("release")


def loop_until_failure(ctx: Ctx, port: int, victim: int, count: int, how: str) -> None:
    """Every rank loops all_reduce; ``victim`` announces itself, then is killed (by the parent)
    or exits without goodbye (``how="os_exit"``). The survivors report the error, then try
    once more."""
    import numpy as np

    import accord as dist

    _init(ctx, "tcp", port=port)
    x = np.empty(count, dtype=np.float32)
    n, i = ctx.world_size, 0
    give_up = time.monotonic() + WAIT_S
    start = time.monotonic()
    try:
        while time.monotonic() < give_up:
            x.fill(ctx.rank + 1)
            dist.all_reduce(x)
            if x[0] != n * (n + 1) / 2:
                raise AssertionError(f"iteration {i}: got {x[0]}")
            i += 1
            if ctx.rank == victim and i == 50:
                if how == "os_exit":
                    ctx.report("exiting", at=time.time())
                    ctx.flush()
                    os._exit(3)
                ctx.report("looping")  # the last report: the parent kills us after reading it
        raise AssertionError(f"rank {ctx.rank}: no error after {i} iterations")
    except dist.DistError as exc:
        ctx.report("failure", exc, at=time.time(), iterations=i,
                   elapsed=time.monotonic() - start)
    ctx.attempt("again", dist.all_reduce, x)
    ctx.attempt("barrier", dist.barrier)
    ctx.wait_for("release")
    dist.destroy_process_group()


def frozen_peer(ctx: Ctx, port: int) -> None:
    """Rank 1 reports "frozen-ready" and is then SIGSTOPped; rank 0 all_reduces into it."""
    import numpy as np

    import accord as dist

    _init(ctx, "tcp", timeout=2.0, port=port)
    x = np.ones(4, dtype=np.float32)
    dist.all_reduce(x)  # all_reduce #1: both alive
    if ctx.rank == 1:
        ctx.report("frozen-ready")
        time.sleep(WAIT_S)  # the parent stops, then kills us
        return
    ctx.wait_for("proceed")
    ctx.attempt("all_reduce", dist.all_reduce, x)  # #2: rank 1 is frozen
    ctx.attempt("again", dist.all_reduce, x)
    ctx.wait_for("release")
    dist.destroy_process_group()


def mismatch(ctx: Ctx, port: int, case: str) -> None:
    import numpy as np

    import accord as dist

    _init(ctx, "tcp", port=port)
    if case == "count":
        ctx.attempt("call", dist.all_reduce, np.ones(4 if ctx.rank == 0 else 8, dtype=np.float32))
        ctx.attempt("next", dist.barrier)
    elif case == "op":
        x = np.ones(4, dtype=np.float32)
        if ctx.rank == 0:
            ctx.attempt("call", dist.broadcast, x, src=0)
        else:
            ctx.attempt("call", dist.all_reduce, x)
        ctx.attempt("next", dist.barrier)
    elif case == "p2p":
        if ctx.rank == 0:
            ctx.attempt("call", dist.send, np.arange(5, dtype=np.float32), dst=1)
            dist.send(np.arange(4, dtype=np.float32) + 100, dst=1, tag=1)
        else:
            ctx.attempt("call", dist.recv, np.zeros(4, dtype=np.float32), src=0)
            good = np.zeros(4, dtype=np.float32)
            dist.recv(good, src=0, tag=1)  # a p2p mismatch does not break the group
            ctx.report("next", values=good.tolist())
    ctx.wait_for("release")
    dist.destroy_process_group()


def orderly_exit(ctx: Ctx, port: int, how: str, receiver_first: bool) -> None:
    """Rank 1 sends one message and leaves at once (destroy_process_group, or a normal exit
    through the atexit hook); rank 0 receives it, then receives again from the departed."""
    import numpy as np

    import accord as dist

    _init(ctx, "tcp", port=port)
    dist.barrier()
    if ctx.rank == 1:
        if receiver_first:
            time.sleep(0.5)  # rank 0 is already blocked in recv
        dist.send(np.arange(1000, dtype=np.int64) * 7, dst=0)
        if how == "destroy":
            dist.destroy_process_group()
        ctx.report("left", at=time.time())
        return  # "exit": the interpreter exits with the world up; the atexit hook says goodbye
    if not receiver_first:
        time.sleep(1.0)  # the message and the GOODBYE are both here before we ask
    got = np.zeros(1000, dtype=np.int64)
    ctx.attempt("recv", dist.recv, got, src=1)
    ctx.report("values", correct=bool((got == np.arange(1000) * 7).all()))
    ctx.attempt("recv_again", dist.recv, got, src=1)
    ctx.wait_for("release")
    dist.destroy_process_group()


def monitored_barrier_after_exit(ctx: Ctx, port: int, transport: str, delay: float) -> None:
    """The docs' example: only rank 0 calls monitored_barrier(wait_all_ranks=True), ``delay``
    seconds after init; the others exit at once (the atexit hook says goodbye)."""
    import accord as dist

    os.environ["ACCORD_TRANSPORT"] = transport
    _init(ctx, "env", port=port)
    if ctx.rank != 0:
        return
    time.sleep(delay)
    ctx.attempt("monitored_barrier", dist.monitored_barrier, timeout=timedelta(seconds=10),
                wait_all_ranks=True)
    ctx.wait_for("release")
    dist.destroy_process_group()


def raise_then_destroy(ctx: Ctx, port: int, culprit: int) -> None:
    """The culprit's own code raises; its finally destroys the world. The others are in an
    all_reduce with it and must hear that it left."""
    import numpy as np

    import accord as dist

    _init(ctx, "tcp", port=port)
    x = np.ones(16, dtype=np.float64)
    dist.all_reduce(x)
    if ctx.rank == culprit:
        try:
            time.sleep(0.5)
            raise KeyError("a bug in the user's training step")
        except KeyError as exc:
            ctx.report("raised", exc, at=time.time())
        finally:
            dist.destroy_process_group()
        return
    ctx.attempt("all_reduce", dist.all_reduce, x)
    ctx.attempt("again", dist.all_reduce, x)
    ctx.wait_for("release")
    dist.destroy_process_group()


def large_messages(ctx: Ctx, port: int, mib: int) -> None:
    """Two ranks exchange ``mib`` MiB both ways at once, then all_reduce as much."""
    import numpy as np

    import accord as dist

    _init(ctx, "tcp", port=port)
    count = (mib << 20) // 4
    peer = 1 - ctx.rank
    mine = np.full(count, ctx.rank + 1, dtype=np.float32)
    mine[-1] = -ctx.rank  # the last element tells a truncated message from a complete one
    theirs = np.zeros(count, dtype=np.float32)

    def isend_recv() -> None:
        work = dist.isend(mine, dst=peer)
        dist.recv(theirs, src=peer)
        work.wait()

    def send_recv() -> None:  # both ranks in a blocking send at the same time
        dist.send(mine, dst=peer, tag=1)
        dist.recv(theirs, src=peer, tag=1)

    for key, exchange in (("isend_recv", isend_recv), ("send_recv", send_recv)):
        theirs.fill(0)
        if ctx.attempt(key, exchange):
            ok = bool((theirs[:-1] == peer + 1).all() and theirs[-1] == -peer)
            ctx.report(f"{key}_values", correct=ok)
    x = (np.arange(count) % 251 + ctx.rank).astype(np.float32)
    if ctx.attempt("all_reduce", dist.all_reduce, x):
        expected = (2 * (np.arange(count) % 251) + 1).astype(np.float32)
        ctx.report("all_reduce_values", correct=bool(np.array_equal(x, expected)))
    dist.barrier()
    dist.destroy_process_group()


def shared_memory(ctx: Ctx, port: int, slot_bytes: int, transport: str = "auto", loops: int = 1) -> None:
    """Every collective over shared memory (see shm_scenarios), ``loops`` times."""
    import accord as dist

    from .shm_scenarios import run_everything

    os.environ.update(ACCORD_SHM_SLOT_BYTES=str(slot_bytes), ACCORD_TRANSPORT=transport,
                      ACCORD_SHM_RING_BYTES=str(64 << 10))
    _init(ctx, "env", port=port)
    for _ in range(loops):
        result = run_everything(ctx.rank, ctx.world_size)
    ctx.report("done", **result)
    dist.destroy_process_group()


def colocated(ctx: Ctx, port: int, calls: int = 200, p2p: bool = False) -> None:
    """Every rank starts on the lowest CPU it may use (moved there, its mask given back), then
    all_reduces 1 MiB (or, ``p2p``, world 2: sends and receives 1 MiB through the shared-memory
    rings) until the ranks are on different CPUs (every rank learns the others', the same
    way), ``calls`` at most. Reports the calls that took, the CPUs, and the moves of this rank."""
    import numpy as np

    import accord as dist
    from accord.api.common import resolve_group
    from accord.transport import placement

    os.environ.update(ACCORD_TRANSPORT="auto")
    _init(ctx, "env", port=port)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    os.sched_setaffinity(0, allowed)
    x = np.ones(1 << 18, np.float32)
    got = np.zeros_like(x)
    cpus = np.zeros(ctx.world_size, np.int64)
    peer = 1 - ctx.rank
    for call in range(1, calls + 1):
        here = np.array([placement.current_cpu()], np.int64)
        if p2p:  # rank 0 sends first; the CPUs travel the same way
            there = np.zeros(1, np.int64)
            for first in (ctx.rank == 0, ctx.rank != 0):
                if first:
                    dist.send(x, peer)
                    dist.send(here, peer)
                else:
                    dist.recv(got, peer)
                    dist.recv(there, peer)
            cpus[ctx.rank], cpus[peer] = here[0], there[0]
        else:
            dist.all_reduce(x)
            dist.all_gather_into_tensor(cpus, here)
        if len(set(cpus.tolist())) == ctx.world_size:
            break
    ok = bool((got == 1).all()) if p2p else bool((x == ctx.world_size ** call).all())
    group = resolve_group(None, "colocated")
    moves = group.engine.mesh.moves if p2p else group.engine._shm.moves
    ctx.report("done", calls=call, cpus=cpus.tolist(), correct=ok, moves=moves,
               mask_kept=os.sched_getaffinity(0) == allowed)
    dist.destroy_process_group()


def fault(ctx: Ctx, name: str, **params: Any) -> None:
    """A fault-injection scenario (see fault_scenarios)."""
    from .fault_scenarios import FAULT_SCENARIOS

    FAULT_SCENARIOS[name](ctx, **params)


def membership(ctx: Ctx, name: str, **params: Any) -> None:
    """A membership-change scenario (see membership_scenarios)."""
    from .membership_scenarios import MEMBERSHIP_SCENARIOS

    MEMBERSHIP_SCENARIOS[name](ctx, **params)


SCENARIOS: dict[str, Callable[..., None]] = {
    "fault": fault,
    "membership": membership,
    "shared_memory": shared_memory,
    "colocated": colocated,
    "collectives": collectives,
    "init_only": init_only,
    "loop_until_failure": loop_until_failure,
    "frozen_peer": frozen_peer,
    "mismatch": mismatch,
    "orderly_exit": orderly_exit,
    "monitored_barrier_after_exit": monitored_barrier_after_exit,
    "raise_then_destroy": raise_then_destroy,
    "large_messages": large_messages,
}


# ---------------------------------------------------------------------------------------------
# the parent side
# ---------------------------------------------------------------------------------------------
class ChildFailed(AssertionError):
    pass


class Job:
    """Some ranks of a job, each in its own spawned process, and what they report.

    ``start`` returns once every child is ready and has been told to go; ``expect`` collects
    reports (bounded by a timeout); ``close`` kills whatever is still running.
    """

    def __init__(self, scenario: str, world_size: int, ranks: list[int] | None = None,
                 **params: Any) -> None:
        self._mp = multiprocessing.get_context("spawn")
        self.world_size = world_size
        self.ranks = list(range(world_size)) if ranks is None else ranks
        self.results = {rank: self._mp.Queue() for rank in self.ranks}
        self.events = {name: self._mp.Event() for name in EVENTS}
        self.procs = {
            rank: self._mp.Process(target=child_main, name=f"accord-rank-{rank}", daemon=True,
                                   args=(scenario, rank, world_size, params,
                                         self.results[rank], self.events))
            for rank in self.ranks
        }
        self._unread: list[Report] = []
        self.expected_dead: set[int] = set()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> Job:
        for proc in self.procs.values():
            proc.start()
        self.expect("ready", timeout=timeout)
        self.events["go"].set()
        return self

    def pid(self, rank: int) -> int:
        pid = self.procs[rank].pid
        assert pid is not None
        return pid

    def signal(self, rank: int, signum: int) -> None:
        os.kill(self.pid(rank), signum)
        if signum == signal.SIGKILL:
            self.expected_dead.add(rank)

    def set(self, event: str) -> None:
        self.events[event].set()

    def expect(self, key: str, ranks: list[int] | None = None,
               timeout: float = 30.0) -> dict[int, Report]:
        """The ``key`` report of each of ``ranks`` (default: every rank), waiting at most
        ``timeout`` seconds; a child that fails unexpectedly or dies silently fails the test."""
        wanted = set(self.ranks if ranks is None else ranks)
        found: dict[int, Report] = {}
        give_up = time.monotonic() + timeout
        while True:
            self._receive()
            for report in list(self._unread):
                if report.key == key and report.rank in wanted:
                    self._unread.remove(report)
                    found[report.rank] = report
            if set(found) == wanted:
                return found
            if time.monotonic() > give_up:
                raise ChildFailed(f"no {key!r} report from ranks {sorted(wanted - set(found))} "
                                  f"within {timeout} s; other reports: {self._unread}")
            self._check_alive(wanted - set(found), key)
            time.sleep(0.005)

    def _receive(self) -> None:
        """Move every report waiting in the children's queues to ``_unread``."""
        for results in self.results.values():
            while True:
                try:
                    report = results.get_nowait()
                except queue_module.Empty:
                    break
                if report.key == "uncaught":
                    raise ChildFailed(f"rank {report.rank} failed: {report.type_name}: "
                                      f"{report.message}\n{report.info.get('traceback', '')}")
                self._unread.append(report)

    def _check_alive(self, waiting: set[int], key: str) -> None:
        for rank in waiting:
            proc = self.procs[rank]
            if proc.exitcode is not None and rank not in self.expected_dead:
                try:  # its last words may still be in the pipe
                    self._unread.append(self.results[rank].get(timeout=1.0))
                    return
                except queue_module.Empty:
                    pass
                raise ChildFailed(f"rank {rank} exited with code {proc.exitcode} before "
                                  f"reporting {key!r}")

    def join(self, timeout: float = 30.0, ranks: list[int] | None = None) -> dict[int, int | None]:
        """Wait for ``ranks`` (default: all) to exit; their exit codes (None: still running)."""
        give_up = time.monotonic() + timeout
        procs = {rank: self.procs[rank] for rank in (self.ranks if ranks is None else ranks)}
        for proc in procs.values():
            proc.join(max(0.0, give_up - time.monotonic()))
        return {rank: proc.exitcode for rank, proc in procs.items()}

    def close(self) -> None:
        """Release the children, give them a moment to leave, then kill the rest."""
        self.events["release"].set()
        self.events["go"].set()
        self.join(timeout=10.0)
        for proc in self.procs.values():
            if proc.is_alive():
                try:
                    os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
                    os.kill(proc.pid, signal.SIGCONT)  # type: ignore[arg-type]
                except ProcessLookupError:
                    pass
                proc.join(5.0)
        for results in self.results.values():
            results.close()
            results.cancel_join_thread()
