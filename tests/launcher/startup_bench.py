"""Start-up cost: from starting the launcher to the first completed all_reduce, accordrun against
torchrun on the same script (accord vs torch.distributed with gloo). Not a test: run it by hand,

    python tests/launcher/startup_bench.py [--runs 5] [--nproc 4]

It prints the median of each and the runs themselves. Each worker prints the wall-clock time
after its first all_reduce; the job's time is the last of them minus the launch instant.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = '''
import sys, time
if sys.argv[1] == "torch":
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    data = torch.ones(2)
else:
    import numpy as np, accord as dist
    dist.init_process_group("gloo")
    data = np.ones(2, dtype=np.float32)
dist.all_reduce(data)
print(f"STAMP {time.time():.6f}", flush=True)
dist.destroy_process_group()
'''


def _launcher(kind: str) -> list[str]:
    bindir = Path(sys.executable).parent
    name = "accordrun" if kind == "accord" else "torchrun"
    found = bindir / name if (bindir / name).exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found next to {sys.executable} nor on PATH")
    return [str(found)]


def one_run(kind: str, nproc: int, script: str) -> tuple[float, float]:
    """(seconds to the last rank's first all_reduce, seconds to the launcher's exit)."""
    start = time.time()
    done = subprocess.run([*_launcher(kind), "--nproc-per-node", str(nproc), "--standalone",
                           script, kind], capture_output=True, text=True, timeout=300)
    end = time.time()
    # torchrun passes worker output through unbuffered and unprefixed: lines may interleave
    stamps = [float(stamp) for stamp in re.findall(r"STAMP (\d+\.\d{6})", done.stdout)]
    if done.returncode or len(stamps) != nproc:
        raise SystemExit(f"{kind} run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return max(stamps) - start, end - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "first_allreduce.py")
        Path(script).write_text(WORKER)
        results: dict[str, list[tuple[float, float]]] = {"accord": [], "torch": []}
        for _ in range(args.runs):  # interleaved, so drifting machine load hits both alike
            for kind in results:
                results[kind].append(one_run(kind, args.nproc, script))
    for kind, runs in results.items():
        first = statistics.median(r[0] for r in runs)
        total = statistics.median(r[1] for r in runs)
        print(f"{kind:6} --nproc-per-node {args.nproc}: first all_reduce after {first:.2f} s "
              f"(median of {len(runs)}), launcher exit after {total:.2f} s; runs: "
              + ", ".join(f"{r[0]:.2f}" for r in runs))


if __name__ == "__main__":
    main()
