"""Functions for accord.spawn's tests: spawned children import them by module name."""

import os
import signal
import time


def record(i, folder):
    with open(os.path.join(folder, f"{i}.txt"), "w") as handle:
        handle.write(f"{i} {os.getpid()}")


def raise_in_one(i, bad):
    if i == bad:
        raise ValueError(f"child {i} failed on purpose")
    time.sleep(60)


def die_in_one(i, bad, how):
    if i == bad:
        if how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(7)
    time.sleep(60)


def sleep_briefly(i, seconds):
    time.sleep(seconds)
