"""An elastic job: all_reduce rank-derived integers and report, then, on attempts below HOLD
(default 1), keep all-reducing until RELEASE_FILE exists on some rank (they agree on it in the
same all_reduce) or 60 s pass, so a test can kill or add a node mid-job. QUIET=1: hold by
sleeping, without a collective that would notice a peer's death (only the launcher can)."""

import os
import sys
import time

import numpy as np

import accord as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    data = np.full(2, rank + 1, dtype=np.int64)
    dist.all_reduce(data)
    assert data.tolist() == [size * (size + 1) // 2] * 2, data
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print(f"RESULT rank={rank} size={size} attempt={attempt} sum={int(data[0])} "
          f"node={os.environ['GROUP_RANK']}/{os.environ['GROUP_WORLD_SIZE']} pid={os.getpid()}",
          flush=True)
    release = os.environ.get("RELEASE_FILE", "")
    if attempt < int(os.environ.get("HOLD", "1")):
        deadline = time.monotonic() + 60
        while os.environ.get("QUIET") == "1" and time.monotonic() < deadline:
            time.sleep(0.05)
        while time.monotonic() < deadline:
            flag = np.array([int(bool(release) and os.path.exists(release))], dtype=np.int64)
            dist.all_reduce(flag)  # a lost peer shows here; every rank sees the release at once
            if flag[0]:
                break
            time.sleep(0.05)
        else:
            sys.exit("held 60 s without being released")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
