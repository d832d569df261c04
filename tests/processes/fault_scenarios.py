"""What the fault-injection tests (test_fault_injection.py) run in each rank.

Every scenario takes ``transport``: "shm" (the default between processes on one host: shared
memory for collectives, the TCP mesh underneath) or "tcp" (``ACCORD_TRANSPORT=tcp``, set here
before init), and reports "initialized" with ``shared`` (whether the default group really uses
shared memory) so the parent can check the transport it asked for is the one it got.

They are reached through procs.SCENARIOS["fault"] (``procs.fault``, which imports this module
in the child only, as ``procs.shared_memory`` imports shm_scenarios): ``Job("fault", n,
name="mixed_loop", ...)``. ``unguarded_main`` is a second child entry point for a rank whose
exception must escape to the interpreter, as a user's uncaught exception would.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from datetime import timedelta
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.testing import assert_array_equal

from .procs import SCENARIOS, WAIT_S, Ctx, _init

BIG = 256 * 1024  # float32 elements (1 MiB): ring / chunked / single-copy all_reduce
_BIG_BASE = (np.arange(BIG) % 97).astype(np.float32)


def _start(ctx: Ctx, port: int, transport: str, timeout: float = 60.0) -> Any:
    import accord as dist

    if transport == "tcp":
        os.environ["ACCORD_TRANSPORT"] = "tcp"
    elif transport == "shm":
        os.environ.pop("ACCORD_TRANSPORT", None)
    else:
        raise ValueError(f"unknown transport {transport!r}")
    _init(ctx, "tcp", timeout=timeout, port=port)
    group = dist.group.WORLD
    ctx.report("initialized", shared=group.engine.shared, pid=os.getpid())
    return group


def _fail_report(ctx: Ctx, key: str, exc: BaseException, start: float, **info: Any) -> None:
    ctx.report(key, exc, at=time.time(), elapsed=time.monotonic() - start,
               traceback=traceback.format_exc(), **info)


# ---------------------------------------------------------------------------------------------
# one round of mixed collectives, every result checked against a closed form
# ---------------------------------------------------------------------------------------------
def mixed_round(rank: int, n: int, i: int, big: np.ndarray) -> None:
    import accord as dist

    tri = n * (n - 1) // 2
    root = i % n
    x = np.arange(8, dtype=np.int64) + rank + i
    dist.all_reduce(x)  # small
    assert_array_equal(x, n * (np.arange(8) + i) + tri)
    np.add(_BIG_BASE, rank, out=big)
    dist.all_reduce(big)  # large
    assert big[0] == tri and big[-1] == n * _BIG_BASE[-1] + tri, (big[0], big[-1])
    b = np.full(1000, rank + i, dtype=np.int32)
    dist.broadcast(b, src=root)
    assert_array_equal(b, np.full(1000, root + i, dtype=np.int32))
    outs = [np.zeros(5, dtype=np.float64) for _ in range(n)]
    dist.all_gather(outs, np.full(5, float(rank)))
    for j, o in enumerate(outs):
        assert_array_equal(o, np.full(5, float(j)))
    out = np.zeros(6, dtype=np.int64)
    dist.reduce_scatter(out, [np.full(6, 10 * rank + j, dtype=np.int64) for j in range(n)])
    assert_array_equal(out, np.full(6, 10 * tri + n * rank))
    got = [np.zeros(3, dtype=np.int64) for _ in range(n)]
    dist.all_to_all(got, [np.full(3, 10 * rank + j, dtype=np.int64) for j in range(n)])
    for j, o in enumerate(got):
        assert_array_equal(o, np.full(3, 10 * j + rank))
    dist.barrier()
    gather = [np.zeros(4, dtype=np.int64) for _ in range(n)] if rank == root else None
    dist.gather(np.full(4, rank, dtype=np.int64), gather, dst=root)
    if gather is not None:
        for j, o in enumerate(gather):
            assert_array_equal(o, np.full(4, j))
    mine = np.zeros(4, dtype=np.int64)
    parts = [np.full(4, 7 * j, dtype=np.int64) for j in range(n)] if rank == root else None
    dist.scatter(mine, parts, src=root)
    assert_array_equal(mine, np.full(4, 7 * rank))


def large_round(rank: int, n: int, i: int, big: np.ndarray) -> None:
    import accord as dist

    np.add(_BIG_BASE, rank + i, out=big)
    dist.all_reduce(big)
    assert big[0] == n * i + n * (n - 1) // 2, (i, big[0])


def mixed_loop(ctx: Ctx, port: int, transport: str, timeout: float = 60.0,
               culprit: int = -1, raise_at: int = -1, large_only: bool = False,
               laggard: int = -1, lag: float = 0.0, leave_at_once: bool = False,
               go_on: int = 0) -> None:
    """Every rank loops ``mixed_round`` (or, ``large_only``, a large all_reduce) until a
    collective fails (the parent kills or stops a rank, or ``culprit`` raises a user error at
    round ``raise_at``); reports "looping" after the first round, then the failure, then how
    two later calls go; stays until released. ``laggard`` sleeps ``lag`` seconds before each
    round (so the others are already waiting for it in the next one). ``leave_at_once``: a
    survivor destroys and returns as soon as its call failed, as a program whose exception ends
    it does (the others may then see it leave before they see the root cause). ``go_on``: the
    survivors shrink the default group by the ranks they saw go and run that many more rounds
    on it, every result checked, then report "continued"."""
    import accord as dist

    _start(ctx, port, transport, timeout)
    big = np.empty(BIG, dtype=np.float32)
    one_round = large_round if large_only else mixed_round
    i = 0
    give_up = time.monotonic() + WAIT_S
    start = time.monotonic()
    try:
        while time.monotonic() < give_up:
            if ctx.rank == culprit and i == raise_at:
                ctx.report("raising", at=time.time(), iterations=i)
                ctx.flush()
                _user_code_with_a_bug(i)
            if ctx.rank == laggard:
                time.sleep(lag)
            one_round(ctx.rank, ctx.world_size, i, big)
            i += 1
            if i == 1:
                ctx.report("looping", at=time.time())
        raise AssertionError(f"rank {ctx.rank}: no error after {i} rounds")
    except dist.DistError as exc:
        _fail_report(ctx, "failure", exc, start, iterations=i)
        if leave_at_once:  # as a program whose exception ends it: destroy and go at once
            dist.destroy_process_group()
            ctx.report("destroyed")
            return
        if go_on:
            lost = dist.lost_ranks()
            start = time.monotonic()
            dist.shrink_group(lost)
            shrunk = time.monotonic() - start
            for j in range(go_on):
                one_round(dist.get_rank(), dist.get_world_size(), j, big)
            ctx.report("continued", lost=lost, rank=dist.get_rank(), size=dist.get_world_size(),
                       shrink_s=shrunk)
            ctx.wait_for("release")
            dist.destroy_process_group()
            ctx.report("destroyed")
            return
    ctx.attempt("again", dist.all_reduce, np.ones(4, dtype=np.float32))
    ctx.attempt("barrier", dist.barrier)
    ctx.wait_for("release")
    dist.destroy_process_group()
    ctx.report("destroyed")


def _user_code_with_a_bug(i: int) -> None:
    table: dict[str, int] = {}
    table["lr"] = table["learning_rate"] * i  # KeyError, escapes to the interpreter


# ---------------------------------------------------------------------------------------------
# disagreements
# ---------------------------------------------------------------------------------------------
def _mismatched_call(case: str, rank: int) -> tuple[Callable[[], Any], np.ndarray]:
    """The third call (#3) of the group, and its buffer: rank 1 disagrees with the others."""
    import accord as dist

    odd = rank == 1
    if case == "op":  # rank 1 receives a broadcast from rank 0; the others all_reduce
        x = np.full(4, rank, dtype=np.float32)
        if odd:
            return lambda: dist.broadcast(x, src=0), x
        return lambda: dist.all_reduce(x), x
    if case == "dtype":
        y = np.full(4, rank, dtype=np.float32 if odd else np.int64)
        return lambda: dist.all_reduce(y), y
    if case == "count":
        z = np.full(8 if odd else 4, rank, dtype=np.float32)
        return lambda: dist.all_reduce(z), z
    if case == "root":
        w = np.full(4, rank, dtype=np.float32)
        return lambda: dist.broadcast(w, src=1 if odd else 0), w
    if case == "skip":  # rank 1 skips the third all_reduce and goes on to the barrier
        v = np.full(4, rank, dtype=np.float32)
        if odd:
            return dist.barrier, v
        return lambda: dist.all_reduce(v), v
    raise ValueError(f"unknown mismatch case {case!r}")


def mismatch(ctx: Ctx, port: int, transport: str, case: str, late_rank: int = -1,
             late_s: float = 0.0) -> None:
    """Two calls that agree (#1, #2), then a disagreement in call #3 (``_mismatched_call``),
    then a barrier ("next"; after "skip", the barrier every rank but 1 calls next), then one
    more ("after"). ``late_rank`` starts call #3 ``late_s`` seconds after the others."""
    import accord as dist

    _start(ctx, port, transport)
    x = np.arange(4, dtype=np.float32)
    dist.all_reduce(x)  # 1
    dist.all_reduce(x)  # 2
    call, buffer = _mismatched_call(case, ctx.rank)
    if ctx.rank == late_rank:
        time.sleep(late_s)
    ctx.attempt("call", call)
    ctx.report("values", values=buffer.tolist())
    if not (case == "skip" and ctx.rank == 1):
        ctx.attempt("next", dist.barrier)
    ctx.attempt("after", dist.barrier)
    ctx.wait_for("release")
    dist.destroy_process_group()
    ctx.report("destroyed")


# ---------------------------------------------------------------------------------------------
# abort from another thread
# ---------------------------------------------------------------------------------------------
def abort_from_thread(ctx: Ctx, port: int, transport: str, blocked: str, stopper: str,
                      timeout: float = 2.0) -> None:
    """Rank 0 blocks in a call that cannot complete (``blocked``: "recv" from rank 1, which
    never sends, or "all_reduce", which nobody else calls); after 0.3 s another of its threads
    calls ``stopper`` ("destroy": destroy_process_group(), "abort": the group's abort()).
    The group timeout (``timeout``) only bounds a call that nothing else ends.
    Rank 1 waits in a recv from rank 0 (never sent); rank 2 and up in a barrier, or in such a
    recv too when rank 0 blocks in all_reduce (a barrier against it would be a mismatch)."""
    import accord as dist

    group = _start(ctx, port, transport, timeout)
    dist.barrier()  # 1: everybody is up
    start = time.monotonic()
    if ctx.rank == 0:
        stopped: dict[str, Any] = {}

        def stop() -> None:
            time.sleep(0.3)
            stopped["at"] = time.time()
            try:
                if stopper == "destroy":
                    dist.destroy_process_group()
                else:
                    group.abort()
            except BaseException as exc:  # noqa: BLE001 — reported, the parent judges
                stopped["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            stopped["returned"] = time.time()

        thread = threading.Thread(target=stop, name="stopper", daemon=True)
        thread.start()
        try:
            if blocked == "recv":
                dist.recv(np.zeros(4, dtype=np.float32), src=1, tag=5)
            else:
                dist.all_reduce(np.ones(4, dtype=np.float32))
            ctx.report("blocked", at=time.time(), elapsed=time.monotonic() - start)
        except Exception as exc:  # noqa: BLE001
            _fail_report(ctx, "blocked", exc, start)
        thread.join(10.0)
        ctx.report("stopper", alive=thread.is_alive(), **stopped)
    elif ctx.rank == 1 or blocked == "all_reduce":  # (a collective would be a mismatch)
        ctx.attempt("pending", dist.recv, np.zeros(4, dtype=np.float32), src=0, tag=6)
    else:
        ctx.attempt("pending", dist.barrier)
    ctx.wait_for("release")
    if dist.is_initialized():
        dist.destroy_process_group()
    ctx.report("destroyed")


# ---------------------------------------------------------------------------------------------
# a member destroys a subgroup while the others wait in it
# ---------------------------------------------------------------------------------------------
def leave_subgroup(ctx: Ctx, port: int, transport: str, blocked: str, timeout: float = 30.0) -> None:
    """Ranks 0..n-1 make a subgroup of all; one call on it works. Then rank 0 waits in a call
    on it that rank 1 never makes (``blocked``: "all_reduce", or "recv" from rank 1), and rank
    1 destroys the subgroup 0.3 s later and goes on working (a world barrier with the ranks
    not involved, then waits for "release"). The waiting call must raise at once, naming
    rank 1, long before the group timeout (``timeout``)."""
    import accord as dist

    _start(ctx, port, transport, timeout)
    sub = dist.new_group(list(range(ctx.world_size)), timeout=timedelta(seconds=timeout))
    x = np.ones(4, dtype=np.float32)
    dist.all_reduce(x, group=sub)  # sub's call #1: everybody
    ctx.report("used", total=float(x[0]), shared=sub.engine.shared)
    start = time.monotonic()
    if ctx.rank == 0:
        try:
            if blocked == "recv":
                dist.recv(np.zeros(4, dtype=np.float32), src=1, tag=3, group=sub)
            else:
                dist.all_reduce(x, group=sub)  # #2: rank 1 leaves after #1
            ctx.report("blocked", at=time.time(), elapsed=time.monotonic() - start)
        except Exception as exc:  # noqa: BLE001
            _fail_report(ctx, "blocked", exc, start)
    elif ctx.rank == 1:
        time.sleep(0.3)
        left_at = time.time()
        dist.destroy_process_group(sub)
        ctx.report("left", at=left_at, returned=time.time())
    ctx.wait_for("proceed")
    dist.barrier()  # the world group still works for everybody
    ctx.report("world works")
    ctx.wait_for("release")
    dist.destroy_process_group()
    ctx.report("destroyed")


def group_churn(ctx: Ctx, port: int, transport: str, cycles: int = 100) -> None:
    """``cycles`` times: new_group of all, one all_reduce on it, destroy it. Reports the open
    descriptors and shared-memory mappings before and after, with the garbage collector off
    (destroy must release at once, not when the collector happens to run)."""
    import gc

    import accord as dist

    _start(ctx, port, transport)

    def counts() -> tuple[int, int]:
        with open("/proc/self/maps") as maps:
            mapped = sum(1 for line in maps if "/dev/shm/" in line)
        return len(os.listdir("/proc/self/fd")), mapped

    x = np.ones(4, dtype=np.float32)
    warm = dist.new_group(list(range(ctx.world_size)))  # first-use costs (lazy imports, sockets)
    dist.all_reduce(x, group=warm)
    dist.destroy_process_group(warm)
    gc.collect()
    gc.disable()
    try:
        before = counts()
        for _ in range(cycles):
            group = dist.new_group(list(range(ctx.world_size)))
            dist.all_reduce(x, group=group)
            dist.destroy_process_group(group)
        after = counts()
    finally:
        gc.enable()
    ctx.report("counts", before=before, after=after)
    dist.destroy_process_group()


FAULT_SCENARIOS: dict[str, Callable[..., None]] = {
    "group_churn": group_churn,
    "leave_subgroup": leave_subgroup,
    "mixed_loop": mixed_loop,
    "mismatch": mismatch,
    "abort_from_thread": abort_from_thread,
}


# ---------------------------------------------------------------------------------------------
# a child whose exception escapes
# ---------------------------------------------------------------------------------------------
def unguarded_main(scenario: str, rank: int, world_size: int, params: dict, results: Any,
                   events: dict[str, Any]) -> None:
    """procs.child_main, except that the scenario's exception is not caught: multiprocessing
    prints its traceback and the interpreter exits with code 1 the normal way (threads joined,
    atexit hooks run), as a script's uncaught exception does."""
    ctx = Ctx(rank, world_size, results, events)
    import accord  # noqa: F401

    ctx.report("ready", pid=os.getpid())
    ctx.wait_for("go")
    try:
        SCENARIOS[scenario](ctx, **params)
    finally:
        ctx.flush()
