"""Say which store and secret this worker got (the secret as a digest), then wait until the
file named by argv[1] exists (at most 60 s) and check the store still serves."""

import hashlib
import os
import sys
import time
from datetime import timedelta

from accord.store.tcp_store import TCPStore

secret = os.environ.get("ACCORD_SECRET", "")
digest = hashlib.sha256(secret.encode()).hexdigest()[:16] if secret else "none"
print(f"PROBE {os.environ['MASTER_PORT']} {digest}", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                 timeout=timedelta(seconds=10))
store.set(f"probe/{os.environ['RANK']}", "done")
print("STILL SERVING", flush=True)
