"""Run ranks as threads over the in-process loopback transport, with the full public API.

``run_ranks(n, body)`` gives each thread its own World (``world_scope``), so ``body(rank)``
can call ``accord.all_reduce(x)`` exactly as a real process would. The first failing rank is
"killed" on the fabric so the others fail fast instead of waiting for their deadline; the
harness then raises the first failure with its rank.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, TypeVar

import accord
from accord.api.worlds import build_world
from accord.store import HashStore
from accord.transport.loopback import LoopbackFabric
from accord.world import world_scope

T = TypeVar("T")


class RankFailed(AssertionError):
    pass


def run_ranks(world_size: int, body: Callable[[int], T], *, timeout: float = 10.0,
              fabric: LoopbackFabric | None = None, expect_failure: bool = False) -> list[Any]:
    """Run ``body(rank)`` on ``world_size`` threads; return their results, or (with
    expect_failure) their results-or-exceptions."""
    store = HashStore()
    fabric = fabric or LoopbackFabric(world_size)
    results: list[Any] = [None] * world_size
    failures: dict[int, BaseException] = {}

    def run_one(rank: int) -> None:
        world = None
        try:
            world = build_world(store, rank, world_size, "accord", timeout, owns_store=False,
                                mesh_factory=lambda *_: fabric.mesh(rank))
            with world_scope(world):
                results[rank] = body(rank)
        except BaseException as exc:  # noqa: BLE001
            failures[rank] = exc
            results[rank] = exc
            if not expect_failure:
                fabric.kill(rank)
        finally:
            if world is not None:
                world.destroy()

    threads = [threading.Thread(target=run_one, args=(r,), name=f"rank-{r}", daemon=True)
               for r in range(world_size)]
    for thread in threads:
        thread.start()
    give_up = time.monotonic() + 2 * timeout + 5
    for thread in threads:
        thread.join(max(0.0, give_up - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        raise AssertionError(f"{stuck} still running {2 * timeout + 5:.0f} s after start: a hang")
    if failures and not expect_failure:
        rank, first = min(failures.items(), key=lambda item: _failure_order(item[1]))
        raise RankFailed(f"rank {rank} failed: {type(first).__name__}: {first}") from first
    return results


def _failure_order(exc: BaseException) -> int:
    # a PeerError caused by the harness's kill is a consequence, not the root cause
    return 1 if isinstance(exc, accord.PeerError) else 0
