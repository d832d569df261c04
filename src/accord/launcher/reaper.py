"""The reaper: a tiny watchdog process that kills the workers' process groups if accordrun dies.

Owns: one job only. Workers die with the launcher by themselves (PR_SET_PDEATHSIG, see
worker.py), but what *they* started — a DataLoader's processes, a shell pipeline — would be
orphaned. Each worker leads its own process group, so the reaper holds the list of live groups
and, when the launcher goes away for any reason (its end of the pipe closes, SIGKILL
included), sends SIGKILL to every group still listed. Must not know anything else.

Run by path with ``python -S`` in its own session (terminal signals never reach it), standard
library only. Protocol on stdin, one line each: ``+PGID`` a group started, ``-PGID`` it is
gone (the launcher killed or reaped it; the number may be reused later).
"""

import os
import signal
import sys


def main() -> None:
    groups = set()
    for line in sys.stdin:
        line = line.strip()
        if line[:1] == "+" and line[1:].isdigit():
            groups.add(int(line[1:]))
        elif line[:1] == "-" and line[1:].isdigit():
            groups.discard(int(line[1:]))
    for pgid in groups:  # the launcher is gone: nothing it started may outlive it
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    main()
