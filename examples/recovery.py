"""A training job that survives `kill -9` of any of its ranks, without restarting the others.

``python examples/recovery.py`` runs the whole story on one machine: it hosts the job's store
(so that any rank may die), starts 4 workers, kills one at random in the middle of training
(SIGKILL: no goodbye), starts a replacement, and checks that every rank ends with the same
parameters. ``--kills 3`` does it three times in one run.

The part a training script writes is ``train`` below, the recovery loop: on a ``PeerError``
the survivors exclude the ranks they saw go (``shrink_group(lost_ranks())``), wait for the
replacements to join (``grow_group``: the newcomers call ``join_process_group``), and hand
their state — parameters and step — to everyone from rank 0. Survivors may be one step apart
when a rank dies mid-step (some finished the all_reduce, some did not), which the broadcast
of the step from rank 0 settles. The model is a least-squares fit in NumPy; the same loop
works with torch and DDP through ``accord.integrations.torch`` (README: Losing a rank).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

import accord as dist

WORLD, DIM = 4, 16


def data(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s shard of the data (whoever holds that rank now)."""
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((256, DIM))
    return x, x @ np.arange(DIM, dtype=np.float64) + 0.01 * rng.standard_normal(256)


def train(steps: int, joining: bool) -> np.ndarray:
    """The recovery loop: SGD on the average gradient, over a world that may lose ranks."""
    w, state = np.zeros(DIM), np.zeros(1)  # state[0]: the step
    if joining:
        sync(w, state)  # a replacement starts from the survivors' state
    while state[0] < steps:
        x, y = data(dist.get_rank())
        grad = 2 * x.T @ (x @ w - y) / len(y)
        try:
            dist.all_reduce(grad, op=dist.ReduceOp.AVG)
        except dist.PeerError:
            dist.shrink_group(dist.lost_ranks())  # the survivors, renumbered
            dist.grow_group(WORLD)  # back to full size: the replacements join
            sync(w, state)
            continue
        w -= 0.05 * grad
        state[0] += 1
        time.sleep(0.002)  # (a real step computes for a while)
    return w


def sync(w: np.ndarray, state: np.ndarray) -> None:
    """Everyone takes rank 0's parameters and step."""
    dist.broadcast(w, src=0)
    dist.broadcast(state, src=0)


def worker(rank: int, steps: int, joining: bool) -> None:
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    if joining:
        dist.join_process_group(store=store)  # the job's ranks take us in (grow_group)
    else:
        dist.init_process_group("accord", store=store, rank=rank, world_size=WORLD)
    store.add("example/training", 1)  # (the driver kills nobody before every rank trains)
    w = train(steps, joining)
    everyone = [np.zeros(DIM) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, w)
    same = all(np.array_equal(everyone[0], each) for each in everyone)
    print(f"rank {dist.get_rank()}: {'same' if same else 'DIFFERENT'} parameters, w[:3]={w[:3].round(3)}")
    dist.destroy_process_group()
    if not same:
        raise SystemExit(1)


def driver(steps: int, kills: int) -> int:
    """Host the store, start the workers, kill one at random `kills` times, replace it."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), PYTHONUNBUFFERED="1")
    me = os.path.abspath(__file__)

    def start(rank: int, joining: bool = False) -> subprocess.Popen:
        args = [sys.executable, me, "--worker", str(rank), "--steps", str(steps)]
        return subprocess.Popen(args + (["--join"] if joining else []), env=env)

    procs: dict[object, subprocess.Popen] = {rank: start(rank) for rank in range(WORLD)}
    for kill in range(kills):
        # every rank trains (the last replacement too): a kill during init or during a
        # recovery is another story, which this example does not tell
        while store.add("example/training", 0) < WORLD + kill:
            time.sleep(0.05)
        time.sleep(0.5)
        alive = [r for r, p in procs.items() if p.poll() is None]
        if not alive:
            break
        victim = random.choice(alive)
        print(f"driver: kill -9 {victim!r} (pid {procs[victim].pid})", flush=True)
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        procs[f"replacement {kill + 1}"] = start(0, joining=True)
    codes = {r: p.wait(timeout=120) for r, p in procs.items()}
    failed = {r: c for r, c in codes.items() if c not in (0, -signal.SIGKILL)}
    print("driver: every rank ended with the same parameters" if not failed else f"driver: failed: {failed}")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--kills", type=int, default=1)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--join", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is None:
        return driver(args.steps, args.kills)
    worker(args.worker, args.steps, args.join)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
