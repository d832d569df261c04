"""Start a grandchild (sleep), print both pids, then wait to be stopped (at most 120 s)."""

import os
import subprocess
import sys
import time

child = subprocess.Popen(["sleep", "120"])
print(f"PIDS {os.getpid()} {child.pid}", flush=True)
print("READY", file=sys.stderr, flush=True)
time.sleep(120)
