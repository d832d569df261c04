"""One rank of the soak job (tests/processes/test_soak.py): warm up, take a census of the
process (descriptors, threads, RSS, this job's shared-memory segments), then churn groups
(create, use, sometimes break with a mismatch or abort, destroy), run many small collectives, restart
the world a few times, and take the census again. Prints one JSON line: SOAK {...}."""

import gc
import json
import os
import sys
import threading
from datetime import timedelta

import numpy as np

import accord as dist

rank, size, ports = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
cycles, calls, restarts = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])


def census() -> dict:
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    shm = [n for n in os.listdir("/dev/shm") if n.startswith("accord")] if os.path.isdir("/dev/shm") else []
    with open("/proc/self/maps") as f:
        segments = sum(1 for line in f if "/dev/shm/accord" in line)
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count(),
            "mapped_segments": segments,
            "tasks": len(os.listdir("/proc/self/task")),
            "rss": rss_pages * os.sysconf("SC_PAGE_SIZE"), "shm": len(shm)}


def init(generation: int) -> None:
    """Each world on a port of its own: a restart on the same port could meet the previous
    world's store, still serving its last readers."""
    dist.init_process_group(init_method=f"tcp://127.0.0.1:{ports[generation]}", rank=rank,
                            world_size=size,
                            timeout=timedelta(seconds=60), group_name=f"soak{generation}")


def churn(n: int) -> None:
    x = np.ones(2, np.float32)
    for i in range(n):
        group = dist.new_group()
        dist.all_reduce(x, group=group)
        if i % 50 == 7:  # a failure: a mismatch breaks the group, destroy releases it
            try:
                dist.all_reduce(np.ones(2 + rank, np.float32), group=group)
            except dist.CollectiveMismatchError:
                pass
        elif i % 50 == 31:  # an abort, then destroy
            group.abort("soak: abort")
        dist.destroy_process_group(group)


def small(n: int) -> None:
    x = np.ones(2, np.float32)
    out = [np.zeros(2, np.float32) for _ in range(size)]
    for i in range(n):
        kind = i % 4
        if kind == 0:
            dist.all_reduce(x)
        elif kind == 1:
            dist.broadcast(x, src=i % size)
        elif kind == 2:
            dist.all_gather(out, x)
        else:
            dist.barrier()
        if i % 1000 == 0:
            x[:] = 1


def restart(generation: int) -> None:
    dist.destroy_process_group()
    init(generation)


# The garbage collector stays off during the measured part: a descriptor, thread or mapping
# that only it would free (a reference cycle) counts as a leak. RSS is read after a collection.
gc.disable()
init(0)
churn(30)
small(5000)
restart(1)
churn(10)
small(3000)
gc.collect()  # the warm-up's garbage goes; from here on anything held only by a cycle stays
before = census()
churn(cycles)
small(calls)
for g in range(restarts):
    restart(2 + g)
    churn(5)
    small(2000)
after = census()
gc.collect()  # memory (not descriptors or mappings) may wait for the collector's next pass
after["rss"] = census()["rss"]
dist.destroy_process_group()
print("SOAK " + json.dumps({"rank": rank, "before": before, "after": after}), flush=True)
