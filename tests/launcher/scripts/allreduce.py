"""An accord job: all_reduce of rank-derived integers, checked against the closed form.

Environment knobs (for the failure tests):
  FAIL_RANK=r     rank r raises ValueError on attempt 0 (TORCHELASTIC_RESTART_COUNT=0)
  FAIL_MODE=kill  rank FAIL_RANK SIGKILLs itself instead
  FAIL_MODE=exit3 rank FAIL_RANK calls os._exit(3) instead
  FAIL_MODE=slow  rank FAIL_RANK raises, then takes a second to exit (its peers exit first)
"""

import atexit
import os
import signal
import time

import numpy as np

import accord as dist


def fail(rank: int) -> None:
    mode = os.environ.get("FAIL_MODE", "raise")
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "exit3":
        os._exit(3)
    if mode == "slow":
        atexit.register(time.sleep, 1.0)
    raise ValueError(f"rank {rank} fails on purpose")


def main() -> None:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    data = np.arange(4, dtype=np.int64) + rank
    dist.all_reduce(data)
    expected = np.arange(4, dtype=np.int64) * size + size * (size - 1) // 2
    assert (data == expected).all(), (data, expected)
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 0 and rank == int(os.environ.get("FAIL_RANK", "-1")):
        fail(rank)
    if os.environ.get("FAIL_MODE") == "slow":
        dist.barrier()  # where the other ranks hear of the failure and exit before it does
    print(f"RESULT rank={rank} size={size} attempt={attempt} sum={data.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
