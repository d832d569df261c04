"""Hosts one TCPStore server for tests in a process of its own (torch's clients must not share
a process with a server run by a Python thread: their queue_len and list_keys keep the GIL).

    python store_server.py accord|torch|torch-legacy [WORLD_SIZE]

Prints the port, then "ready" once WORLD_SIZE stores (itself included) have joined when a
world size is given, and serves until its stdin closes.
"""

from __future__ import annotations

import sys
from datetime import timedelta


def main() -> None:
    kind = sys.argv[1]
    world_size = int(sys.argv[2]) if len(sys.argv) > 2 else None
    if kind == "accord":
        from accord.store import TCPStore
        options: dict = {}
    else:
        from torch.distributed import TCPStore
        options = {"use_libuv": kind == "torch"}
    # With a world size the constructor waits for the workers, so the port is known before:
    # pass a listening socket.
    import socket
    listener = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    port = listener.getsockname()[1]
    print(port, flush=True)
    store = TCPStore("127.0.0.1", port, world_size, True, timedelta(seconds=60),
                     wait_for_workers=world_size is not None,
                     master_listen_fd=listener.detach(), **options)
    print("ready", flush=True)
    sys.stdin.read()
    del store


if __name__ == "__main__":
    main()
