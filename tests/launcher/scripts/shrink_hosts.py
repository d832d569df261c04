"""One rank of a job over two namespaced hosts that loses ranks and goes on: all_reduce in a
loop (announcing "LOOPING"); on the first error, ``shrink_group(lost_ranks())`` and ten
all_reduces on the shrunk world, checked; then one RESULT JSON line (what it raised, whom it
excluded, its new rank and size, how long the shrink took), then it stays until killed (rank 0
hosts the store). Env: the env:// contract, TIMEOUT (seconds, the group's timeout)."""

import json
import os
import sys
import time
from datetime import timedelta

import numpy as np

import accord as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("TIMEOUT", "60"))))
    rank = dist.get_rank()
    data = np.ones(1 << 16, np.float32)
    calls = 0
    give_up = time.monotonic() + 90
    while time.monotonic() < give_up:
        try:
            dist.all_reduce(data)
        except dist.DistError as exc:
            start = time.monotonic()
            lost = dist.lost_ranks()
            dist.shrink_group(lost)
            shrunk = time.monotonic() - start
            n, me = dist.get_world_size(), dist.get_rank()
            sums = []
            for i in range(10):
                x = np.full(1 << 16, me + 1.0 + i, np.float32)  # (large enough for the hierarchy)
                dist.all_reduce(x)
                sums.append(bool((x == n * (n + 1) / 2 + n * i).all()))
            print("RESULT " + json.dumps({"rank": rank, "error": type(exc).__name__, "lost": lost,
                                          "new_rank": me, "size": n, "shrink_s": shrunk,
                                          "correct": all(sums), "at": time.time()}), flush=True)
            time.sleep(60)
            os._exit(0)
        data.fill(1)
        calls += 1
        if calls == 5:
            print(f"LOOPING rank={rank} pid={os.getpid()}", flush=True)
    sys.exit("looped 90 s without an error")


if __name__ == "__main__":
    main()
