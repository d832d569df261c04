"""A training job that goes on when a rank is lost (test_replace.py runs it under accordrun).

The same script for the first workers and for their replacements (ACCORD_JOIN=1, which
accordrun --replace-workers sets): init_process_group (a replacement joins there), everyone
takes rank 0's state, then SGD with the recovery loop (shrink_group, grow_group, sync).

Lines it prints, for the test (times are time.time()):
  TRAINING rank=r pid=p joined=0|1 started=t imported=t init=t   once it trains
  GROWN rank=r caught=t grown=t                                  a survivor, after grow_group
  PARAMS rank=r same=1|0 digest=d steps=n restart=k              at the end
Environment knobs:
  STEPS=n          steps to train (default 2000)
  NO_RECOVERY=1    no recovery loop: a PeerError ends the worker
"""

import time

STARTED = time.time()

import hashlib  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

import accord as dist  # noqa: E402

IMPORTED = time.time()
DIM = 8


def gradient(w: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(dist.get_rank())
    x = rng.integers(-3, 4, (64, DIM)).astype(np.float64)
    y = x @ np.arange(DIM, dtype=np.float64)
    return 2 * x.T @ (x @ w - y) / len(y)


def sync(w: np.ndarray, state: np.ndarray) -> None:
    dist.broadcast(w, src=0)
    dist.broadcast(state, src=0)


def main() -> None:
    dist.init_process_group("accord")
    initialized = time.time()
    world_size = int(os.environ["WORLD_SIZE"])
    w, state = np.zeros(DIM), np.zeros(1)
    sync(w, state)
    joined = int(os.environ.get("ACCORD_JOIN", "0") == "1")
    print(f"TRAINING rank={dist.get_rank()} pid={os.getpid()} joined={joined} started={STARTED:.3f} "
          f"imported={IMPORTED:.3f} init={initialized:.3f}", flush=True)
    steps = int(os.environ.get("STEPS", "2000"))
    recover = os.environ.get("NO_RECOVERY") != "1"
    while state[0] < steps:
        grad = gradient(w)
        try:
            dist.all_reduce(grad, op=dist.ReduceOp.AVG)
        except dist.PeerError:
            if not recover:
                raise
            caught = time.time()
            dist.shrink_group(dist.lost_ranks())
            dist.grow_group(world_size)
            print(f"GROWN rank={dist.get_rank()} caught={caught:.3f} grown={time.time():.3f}", flush=True)
            sync(w, state)
            continue
        w -= 0.01 * grad
        state[0] += 1
        time.sleep(0.002)
    everyone = [np.zeros(DIM) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, w)
    same = all(np.array_equal(everyone[0], each) for each in everyone)
    digest = hashlib.sha1(w.tobytes()).hexdigest()[:12]
    print(f"PARAMS rank={dist.get_rank()} same={int(same)} digest={digest} steps={int(state[0])} "
          f"restart={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
