"""The two-host job: all_reduce, report the address this rank published for its TCP peers and
the peers it reaches through shared memory, then (attempt 0, with LINGER=1) keep all-reducing
until stopped or 60 s pass, so a test can kill one host's workers mid-job."""

import json
import os
import sys
import time

import numpy as np

import accord as dist
from accord.world import current_world


def published_address(rank: int) -> str:
    """The host in this rank's transport record (PeerRecord JSON under accord/0/peer/<rank>)."""
    record = json.loads(current_world().store.get(f"accord/0/peer/{rank}"))
    return record["host"]


def ring_peers() -> str:
    """The peers this rank reaches through shared-memory rings ("n/a": no such transport)."""
    rings = getattr(current_world().mesh, "ring_peers", None)
    if callable(rings):
        rings = rings()
    return "n/a" if rings is None else ",".join(str(peer) for peer in rings) or "none"


def main() -> None:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    rings = ring_peers()  # now: a ring goes away once its peer has left
    data = np.full(3, rank + 1, dtype=np.int64)
    dist.all_reduce(data)
    assert data.tolist() == [size * (size + 1) // 2] * 3, data
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    print(f"RESULT rank={rank} size={size} attempt={attempt} sum={int(data[0])} "
          f"addr={published_address(rank)} pid={os.getpid()} rings={rings}", flush=True)
    if os.environ.get("LINGER") == "1" and attempt == "0":
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            dist.all_reduce(data)
            time.sleep(0.05)
        sys.exit("lingered 60 s without being stopped")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
