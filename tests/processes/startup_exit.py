"""The documents' own pattern, many times: every rank runs init_process_group (env://, rank 0
hosting the TCPStore), one broadcast_object_list from rank 0, and exits without
destroy_process_group. Rank 0 is done first and its process (with the store) goes away while
the others finish; no rank may fail because of that.

Run as a script (tests/processes/test_startup_exit.py does):
    python startup_exit.py --size 4 --runs 10 [--pin] [--start-method fork|spawn]
It prints one JSON line: {"runs": N, "failures": [{"run": i, "rank": r, "exitcode": c,
"error": "..."}]} and exits 0 (the caller judges). ``--pin`` pins every rank to one core.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import traceback

_RUN_TIMEOUT_S = 120.0


def _rank_main(rank: int, size: int, port: int, pin: bool, errors: mp.Queue) -> None:
    if pin:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(size))
    try:
        import accord as dist

        dist.init_process_group("gloo")
        objects = ["foo", 12, {1: 2}] if dist.get_rank() == 0 else [None, None, None]
        dist.broadcast_object_list(objects, src=0)
        if objects != ["foo", 12, {1: 2}]:
            raise AssertionError(f"rank {rank} received {objects!r}")
    except BaseException:  # noqa: BLE001 — reported to the parent, then the rank fails
        errors.put((rank, traceback.format_exc(limit=4)))
        raise SystemExit(1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _one_run(ctx: mp.context.BaseContext, run: int, size: int, pin: bool) -> list[dict]:
    errors = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, size, port, pin, errors)) for r in range(size)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(_RUN_TIMEOUT_S)
    failures = []
    reported = {}
    while not errors.empty():
        rank, text = errors.get()
        reported[rank] = text.strip().splitlines()[-1]
    for rank, proc in enumerate(procs):
        if proc.is_alive():
            proc.kill()
            proc.join()
            failures.append({"run": run, "rank": rank, "exitcode": None, "error": "hung"})
        elif proc.exitcode != 0:
            failures.append({"run": run, "rank": rank, "exitcode": proc.exitcode,
                             "error": reported.get(rank, "no traceback (killed?)")})
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--start-method", default="fork", choices=("fork", "spawn", "forkserver"))
    args = parser.parse_args(argv)
    ctx = mp.get_context(args.start_method)
    if args.start_method == "fork":
        import accord  # noqa: F401 — imported once, before forking (no world exists yet)
    failures: list[dict] = []
    for run in range(args.runs):
        failures += _one_run(ctx, run, args.size, args.pin)
    print(json.dumps({"runs": args.runs, "failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
