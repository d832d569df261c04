"""TCPStore under load: many clients at once against one server. Not a test: run it by hand,

    python tests/store/load_bench.py [--server accord|torch|torch-legacy]
                                     [--client accord|torch] [--procs 6] [--clients 3000]

The server runs in a process of its own. ``--procs`` client processes each open ``--clients``
connections and keep them all open; each connection adds 1 to a shared counter and sets its
own key, then reads the key of the connection with the same index in the next process (which
may not be set yet: the read waits on the server), and finally all connections close. The time
is from starting the client processes to the last one finishing (and, apart, the longest a
client process took from its first connect: without the imports); every read is checked. Each
client process connects its clients one after another, as ranks of a job connect at once.
The server's CPU time is printed too: on a busy machine it varies less than the wall time.

torch's C++ client looks up the name of its socket's address (getnameinfo) on every connect;
on a machine whose DNS server does not answer, some of those lookups wait for the resolver's
timeout (5 s). To measure the server rather than the resolver, run the bench where DNS fails
at once, e.g. in a network namespace with only a loopback interface:

    ip netns add bench && ip -n bench link set lo up
    ip netns exec bench python tests/store/load_bench.py --client torch --procs 4 --clients 500
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import timedelta

TIMEOUT = timedelta(seconds=600)


def _store_class(kind: str):
    if kind == "accord":
        from accord.store import TCPStore
        return TCPStore
    import torch.distributed as td
    return td.TCPStore


def serve(kind: str) -> None:
    """Host a store, print its port, serve until stdin closes."""
    libuv = kind != "torch-legacy"
    store_class = _store_class("accord" if kind == "accord" else "torch")
    options = {} if kind == "accord" else {"use_libuv": libuv}
    store = store_class("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT,
                        **options)
    print(store.port, flush=True)
    sys.stdin.read()
    times = os.times()
    print(f"{times.user + times.system:.2f}", flush=True)
    os._exit(0)  # the clients are gone: no grace period, no teardown


def clients(kind: str, port: int, proc: int, procs: int, count: int) -> None:
    """One client process: ``count`` connections, each add + set, then read a neighbour's key."""
    store_class = _store_class(kind)
    start = time.monotonic()
    opened = [store_class("127.0.0.1", port, is_master=False, wait_for_workers=False,
                          timeout=TIMEOUT) for _ in range(count)]
    for index, store in enumerate(opened):
        store.add("arrived", 1)
        store.set(f"p{proc}/c{index}", f"{proc}:{index}")
    neighbour = (proc + 1) % procs
    for index, store in enumerate(opened):
        value = store.get(f"p{neighbour}/c{index}")
        if value != f"{neighbour}:{index}".encode():
            raise SystemExit(f"client {proc}/{index} read {value!r}")
    print(f"{time.monotonic() - start:.3f} {opened[0].add('arrived', 0)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="accord", choices=["accord", "torch", "torch-legacy"])
    parser.add_argument("--client", default="accord", choices=["accord", "torch"])
    parser.add_argument("--procs", type=int, default=6)
    parser.add_argument("--clients", type=int, default=3000)
    parser.add_argument("--role", default="main", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--proc", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "server":
        return serve(args.server)
    if args.role == "clients":
        return clients(args.client, args.port, args.proc, args.procs, args.clients)
    me = [sys.executable, __file__, "--server", args.server, "--client", args.client,
          "--procs", str(args.procs), "--clients", str(args.clients)]
    server = subprocess.Popen([*me, "--role", "server"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        start = time.monotonic()
        workers = [subprocess.Popen([*me, "--role", "clients", "--port", str(port),
                                     "--proc", str(p)], stdout=subprocess.PIPE, text=True)
                   for p in range(args.procs)]
        outputs = [w.communicate()[0] for w in workers]
        seconds = time.monotonic() - start
        codes = [w.returncode for w in workers]
        cpu = server.communicate(timeout=60)[0].strip()
    finally:
        server.kill()
        server.wait()
    total = args.procs * args.clients
    if codes != [0] * args.procs:
        raise SystemExit(f"client processes failed: exit codes {codes}")
    counts = {int(out.split()[-1]) for out in outputs}
    busy = max(float(out.split()[-2]) for out in outputs)
    print(f"{args.client} clients -> {args.server} server: {total} clients in "
          f"{args.procs} processes, {seconds:.2f} s ({busy:.2f} s from the first connect, after "
          f"the imports); server CPU {cpu} s (counter read {sorted(counts)})")


if __name__ == "__main__":
    main()
