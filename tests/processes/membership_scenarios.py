"""What the shrink tests (test_shrink.py) run in each rank: a job loses a rank (SIGKILLed by
the parent) and its survivors go on in place with ``shrink_group``.

Reached through procs.SCENARIOS["membership"] (``procs.membership`` imports this module in the
child only): ``Job("membership", n, name="shrink_world", ...)``. ``transport`` is "shm" (shared
memory between the processes of one host, the default) or "tcp" (``ACCORD_TRANSPORT=tcp``).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .procs import WAIT_S, Ctx, _init


def _start(ctx: Ctx, port: int, transport: str) -> None:
    if transport == "tcp":
        os.environ["ACCORD_TRANSPORT"] = "tcp"
    else:
        os.environ.pop("ACCORD_TRANSPORT", None)
    _init(ctx, "tcp", port=port)  # rank 0 hosts the store (it must survive)


def _loop_until_failure(ctx: Ctx, victim: int, group: Any, members: list[int]) -> float:
    """all_reduce on ``group`` until it fails (the victim announces itself at call 30 and
    waits to be killed); returns when this rank caught the error (time.time())."""
    import accord as dist

    x = np.empty(1000, np.float32)
    give_up = time.monotonic() + WAIT_S
    i = 0
    try:
        while time.monotonic() < give_up:
            x.fill(ctx.rank + 1)
            dist.all_reduce(x, group=group)
            assert x[0] == sum(r + 1 for r in members), (i, x[0])
            i += 1
            if ctx.rank == victim and i == 30:
                ctx.report("looping")  # the parent kills us after reading it
                ctx.flush()
                time.sleep(WAIT_S)
        raise AssertionError(f"rank {ctx.rank}: no error after {i} calls")
    except dist.DistError as exc:
        caught = time.time()
        ctx.report("failure", exc, at=caught, calls=i)
        return caught


def _check_group(group: Any, ranks: list[int]) -> dict[str, Any]:
    """Collectives and point-to-point on ``group`` (whose members are the global ``ranks``),
    each checked against its closed form; what was checked."""
    import accord as dist

    n, me = len(ranks), dist.get_rank(group)
    x = np.full(5, me + 1.0, np.float32)
    dist.all_reduce(x, group=group)
    assert (x == n * (n + 1) / 2).all(), x
    b = np.full(3, float(me), np.float64)
    dist.broadcast(b, src=ranks[-1], group=group)
    assert (b == n - 1).all(), b
    out = [np.zeros(2, np.int64) for _ in range(n)]
    dist.all_gather(out, np.full(2, ranks[me], np.int64), group=group)
    assert [int(o[0]) for o in out] == ranks, out
    got = np.zeros(1, np.int64)  # a ring of sends: each rank to the next
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    if me % 2 == 0:
        dist.send(np.array([ranks[me]], np.int64), nxt, group=group)
        dist.recv(got, prv, group=group)
    else:
        dist.recv(got, prv, group=group)
        dist.send(np.array([ranks[me]], np.int64), nxt, group=group)
    assert int(got[0]) == prv, got
    dist.barrier(group=group)
    return {"rank": me, "size": n}


def shrink_world(ctx: Ctx, port: int, victim: int, transport: str) -> None:
    """Every rank loops all_reduce on the default group; ``victim`` is killed; the survivors
    shrink the default group and check the new world (renumbered, every call right), and
    that the old world's other group is gone."""
    import accord as dist

    _start(ctx, port, transport)
    others = dist.new_group([r for r in range(ctx.world_size) if r != victim])  # (destroyed by the shrink)
    caught = _loop_until_failure(ctx, victim, None, list(range(ctx.world_size)))
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        new = dist.shrink_group([victim])
    shrunk = time.monotonic() - start
    first = np.ones(1, np.float32)
    dist.all_reduce(first)
    first_at = time.time()
    survivors = [r for r in range(ctx.world_size) if r != victim]
    assert new is dist.group.WORLD, new
    checked = _check_group(None, list(range(len(survivors))))
    try:
        dist.all_reduce(first, group=others)
        old_group = "usable"
    except (dist.DistError, dist.DestroyedGroupError) as exc:
        old_group = type(exc).__name__
    ctx.report("shrunk", rank=dist.get_rank(), size=dist.get_world_size(), shrink_s=shrunk,
               first_after_error_s=first_at - caught, first=float(first[0]), checked=checked,
               old_group=old_group, warned=[str(w.message) for w in warned],
               desc=new.group_desc, membership=_dumped_membership())
    dist.barrier()
    if dist.get_rank() == 0:  # alone in a call: its timeout's stuck report tells the changes
        from datetime import timedelta

        new.set_timeout(timedelta(seconds=1))
        ctx.attempt("stuck", dist.all_reduce, np.ones(1))
    ctx.wait_for("release")
    dist.destroy_process_group()


def _dumped_membership() -> list[dict[str, Any]]:
    """The membership history in this rank's flight-recorder dump."""
    import json
    import tempfile

    import accord as dist

    with tempfile.TemporaryDirectory() as where:
        path = dist.dump_flight_recorder(os.path.join(where, "rank.json"))
        assert path is not None
        with open(path) as f:
            return json.load(f)["membership"]  # type: ignore[no-any-return]


def shrink_subgroup(ctx: Ctx, port: int, victim: int, transport: str) -> None:
    """Ranks 0..2 loop all_reduce on a group of theirs (rank 3, outside it, waits); the victim
    (in it) is killed; the group's survivors shrink that group only: global ranks stay."""
    import accord as dist

    _start(ctx, port, transport)
    members = [0, 1, 2]
    group = dist.new_group(members)
    if ctx.rank not in members:
        ctx.wait_for("release")
        return
    _loop_until_failure(ctx, victim, group, members)
    start = time.monotonic()
    new = dist.shrink_group([members.index(victim)], group=group)
    shrunk = time.monotonic() - start
    survivors = [r for r in members if r != victim]
    checked = _check_group(new, survivors)
    ctx.report("shrunk", rank=dist.get_rank(), group_rank=dist.get_rank(new),
               ranks=dist.get_process_group_ranks(new), shrink_s=shrunk, checked=checked,
               desc=new.group_desc, old_destroyed=group not in dist.world.current_world().groups)
    ctx.wait_for("release")


def disagree(ctx: Ctx, port: int) -> None:
    """Three ranks, no failure: ranks 0 and 1 exclude rank 2 (and make a world of two),
    rank 2 excludes rank 1: it never meets rank 0, and its timeout says who kept whom."""
    import accord as dist

    os.environ.pop("ACCORD_TRANSPORT", None)
    _init(ctx, "tcp", port=port, timeout=3.0)
    dist.barrier()
    if ctx.attempt("shrink", dist.shrink_group, [1] if ctx.rank == 2 else [2]):
        ctx.report("after", size=dist.get_world_size())
    ctx.wait_for("release")
    if dist.is_initialized():
        dist.destroy_process_group()


def replace(ctx: Ctx, port: int, victim: int, transport: str) -> None:
    """A job of ``world_size - 1`` ranks trains (a counter stands for the model); the victim
    is killed; the survivors shrink, then grow back to the job's size, taking in the last
    rank of this Job — a newcomer started beside them that calls join_process_group once the
    parent says "proceed" — and broadcast their state to it; every rank ends with the same
    state and a correct all_reduce."""
    import accord as dist

    job_size, newcomer = ctx.world_size - 1, ctx.rank == ctx.world_size - 1
    os.environ.pop("ACCORD_TRANSPORT", None) if transport == "shm" else os.environ.update(ACCORD_TRANSPORT="tcp")
    state = np.zeros(4)
    if newcomer:
        ctx.wait_for("proceed")
        start = time.monotonic()
        dist.join_process_group(init_method=f"tcp://127.0.0.1:{port}")
        ctx.report("joined", rank=dist.get_rank(), size=dist.get_world_size(),
                   join_s=time.monotonic() - start)
    else:
        dist.init_process_group("accord", init_method=f"tcp://127.0.0.1:{port}", rank=ctx.rank,
                                world_size=job_size)
        x = np.ones(8)
        give_up, i = time.monotonic() + WAIT_S, 0
        try:
            while time.monotonic() < give_up:
                dist.all_reduce(x)
                x.fill(1.0)
                state += 1
                i += 1
                if ctx.rank == victim and i == 30:
                    ctx.report("looping")
                    ctx.flush()
                    time.sleep(WAIT_S)
            raise AssertionError("no failure")
        except dist.DistError as exc:
            start = time.monotonic()
            lost = dist.lost_ranks()  # (not exc.peer: a rank told by another names that one)
            dist.shrink_group(lost)
            shrunk = time.monotonic() - start
            dist.grow_group(job_size)
            ctx.report("grown", rank=dist.get_rank(), size=dist.get_world_size(), shrink_s=shrunk,
                       grow_s=time.monotonic() - start - shrunk, lost=lost, peer=exc.peer)
    dist.broadcast(state, src=0)  # the newcomer gets the state
    states = [np.zeros(4) for _ in range(job_size)]
    dist.all_gather(states, state)
    y = np.full(2, dist.get_rank() + 1.0)
    dist.all_reduce(y)
    ctx.report("state", equal=all((s == states[0]).all() for s in states), value=float(state[0]),
               sum=float(y[0]), membership=_dumped_membership())
    dist.barrier()
    dist.destroy_process_group()


MEMBERSHIP_SCENARIOS: dict[str, Callable[..., None]] = {
    "replace": replace,
    "shrink_world": shrink_world,
    "shrink_subgroup": shrink_subgroup,
    "disagree": disagree,
}
