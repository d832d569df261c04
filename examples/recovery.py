"""A training job that survives `kill -9` of any of its ranks, without restarting the others.

Run it under ``accordrun --replace-workers``, which starts a new worker in the place of one
that dies while the others go on::

    accordrun --nproc-per-node 4 --replace-workers --max-restarts 3 examples/recovery.py

and kill any worker (``kill -9 <pid>``: each prints its pid once it trains). Or run
``python examples/recovery.py``: it starts that command itself, kills a random worker in the
middle of training (SIGKILL: no goodbye), and checks that the job ends with every rank
holding the same parameters. ``--kills 3`` does it three times in one run.

The script is the same for the first workers and for their replacements:
``dist.init_process_group()`` — in a replacement (``ACCORD_JOIN=1``, set by accordrun) it
joins the running job, once the survivors call ``grow_group`` — then ``sync``: everyone takes
rank 0's state, as every data-parallel program does at its start. The part a training script
adds is ``train``'s recovery loop: on a ``PeerError`` the survivors exclude the ranks they saw
go (``shrink_group(lost_ranks())``), wait for the replacements to join (``grow_group``), and
hand their state (parameters and step) to everyone from rank 0. Survivors may be one step
apart when a rank dies mid-step (some finished the all_reduce, some did not), which the
broadcast of the step from rank 0 settles. The model is a least-squares fit in NumPy; the same
loop works with torch and DDP through ``accord.integrations.torch`` (README: Losing a rank).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import accord as dist

WORLD, DIM = 4, 16


def data(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s shard of the data (whoever holds that rank now)."""
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((256, DIM))
    return x, x @ np.arange(DIM, dtype=np.float64) + 0.01 * rng.standard_normal(256)


def train(w: np.ndarray, state: np.ndarray, steps: int, world_size: int) -> np.ndarray:
    """The recovery loop: SGD on the average gradient, over a world that may lose ranks."""
    while state[0] < steps:
        x, y = data(dist.get_rank())
        grad = 2 * x.T @ (x @ w - y) / len(y)
        try:
            dist.all_reduce(grad, op=dist.ReduceOp.AVG)
        except dist.PeerError:
            dist.shrink_group(dist.lost_ranks())  # the survivors, renumbered
            dist.grow_group(world_size)  # back to full size: the replacements join
            if dist.get_rank() == 0:
                print(f"rank 0: back to {world_size} ranks at {time.time():.3f}", flush=True)
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


def worker(steps: int) -> int:
    """One worker under accordrun: an original, or a replacement (ACCORD_JOIN=1)."""
    dist.init_process_group("accord")  # a replacement joins the running job here
    w, state = np.zeros(DIM), np.zeros(1)  # state[0]: the step
    sync(w, state)
    print(f"rank {dist.get_rank()}: training (pid {os.getpid()})", flush=True)
    w = train(w, state, steps, int(os.environ["WORLD_SIZE"]))
    everyone = [np.zeros(DIM) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, w)
    same = all(np.array_equal(everyone[0], each) for each in everyone)
    print(f"rank {dist.get_rank()}: {'same' if same else 'DIFFERENT'} parameters, w[:3]={w[:3].round(3)}")
    dist.destroy_process_group()
    return 0 if same else 1


def demo(steps: int, kills: int) -> int:
    """Run the job under accordrun --replace-workers and kill a random worker ``kills`` times."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(dist.__file__)))
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "accord.run", "--nproc-per-node", str(WORLD), "--replace-workers",
               "--max-restarts", str(kills), os.path.abspath(__file__), "--steps", str(steps)]
    print("driver: " + " ".join(command[2:]), flush=True)
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PYTHONPATH=path))
    training: list[int] = []  # the pids of the workers that train
    recovered: list[float] = []  # when rank 0 was back to full size

    def follow() -> None:
        assert job.stdout is not None
        for line in job.stdout:
            print(line, end="", flush=True)
            if found := re.search(r"training \(pid (\d+)\)", line):
                training.append(int(found.group(1)))
            if found := re.search(r"back to \d+ ranks at ([\d.]+)", line):
                recovered.append(float(found.group(1)))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        kill_workers(job, kills, training, recovered)
        code = job.wait(timeout=300)
    finally:
        if job.poll() is None:  # the driver failed: so does the job
            job.terminate()
            job.wait(timeout=60)
    reader.join(timeout=10)
    print("driver: every rank ended with the same parameters" if code == 0 else f"driver: failed ({code})")
    return code


def kill_workers(job: subprocess.Popen, kills: int, training: list[int], recovered: list[float]) -> None:
    """SIGKILL a random worker ``kills`` times, each once every worker trains."""
    killed: list[int] = []
    for kill in range(kills):
        # every rank trains (the last replacement too): a kill during the start or during a
        # recovery is another story, which this example does not tell
        while len(training) < WORLD + kill and job.poll() is None:
            time.sleep(0.05)
        time.sleep(0.5)
        if job.poll() is not None:
            return
        victim = random.choice([pid for pid in training if pid not in killed])
        killed.append(victim)
        print(f"driver: kill -9 {victim}", flush=True)
        at = time.time()
        os.kill(victim, signal.SIGKILL)
        while len(recovered) <= kill and job.poll() is None:
            time.sleep(0.01)
        if len(recovered) > kill:
            print(f"driver: the job was back to {WORLD} ranks {recovered[kill] - at:.2f} s after the kill")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--kills", type=int, default=1)
    args = parser.parse_args()
    if dist.is_torchelastic_launched():  # a worker of accordrun (or torchrun)
        return worker(args.steps)
    return demo(args.steps, args.kills)


if __name__ == "__main__":
    raise SystemExit(main())
