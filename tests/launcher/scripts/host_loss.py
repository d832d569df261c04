"""One rank of a job over two namespaced hosts, started by the test itself (no launcher, so no
agent stops the others when one fails): OP (all_reduce, or broadcast from rank 1) of COUNT
float32 elements in a loop until a call raises, announcing "LOOPING" once it runs. On the
first error it prints one RESULT JSON line (what it raised, the message, when: time.time()),
then stays until killed, so the rank that hosts the store keeps it up for the others. With
SHRINK=1 the ranks go on first: ``shrink_group(lost_ranks())`` and ten all_reduces on the
shrunk world, checked, and the RESULT line says whom they excluded, the new rank and size,
how long the shrink took and whether every sum was right. Env: the env:// contract, TIMEOUT
(seconds, the group's timeout), OP, COUNT, SHRINK."""

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
    data = np.ones(int(os.environ.get("COUNT", str(1 << 18))), np.float32)
    if os.environ.get("OP", "all_reduce") == "broadcast":
        def call() -> None:
            dist.broadcast(data, src=1)
    else:
        def call() -> None:
            dist.all_reduce(data)
    calls = 0
    give_up = time.monotonic() + 90
    while time.monotonic() < give_up:
        start = time.monotonic()
        try:
            call()
        except Exception as exc:  # noqa: BLE001 — reported to the test, which judges it
            result = {"rank": rank, "error": type(exc).__name__, "message": str(exc), "at": time.time(),
                      "elapsed": time.monotonic() - start, "calls": calls}
            if os.environ.get("SHRINK") == "1":
                result.update(go_on())
            print("RESULT " + json.dumps(result), flush=True)
            time.sleep(60)
            os._exit(0)
        data.fill(1)
        calls += 1
        if calls == 5:
            print(f"LOOPING rank={rank} pid={os.getpid()}", flush=True)
    sys.exit("looped 90 s without an error")


def go_on() -> dict:
    """Shrink by the ranks this one saw go, then ten all_reduces on the shrunk world."""
    start = time.monotonic()
    lost = dist.lost_ranks()
    dist.shrink_group(lost)
    shrunk = time.monotonic() - start
    n, me = dist.get_world_size(), dist.get_rank()
    sums = []
    for i in range(10):
        x = np.full(1 << 16, me + 1.0 + i, np.float32)  # (large enough for the two levels)
        dist.all_reduce(x)
        sums.append(bool((x == n * (n + 1) / 2 + n * i).all()))
    return {"lost": lost, "new_rank": me, "size": n, "shrink_s": shrunk, "correct": all(sums)}


if __name__ == "__main__":
    main()
