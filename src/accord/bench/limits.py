"""The transport's ceiling: what one loopback TCP socket pair moves (``tcp_limit`` and
``tcp_oneway`` rows).

Owns: connecting each even rank to the next odd one by a raw TCP socket (the listener's port
shared through the benchmarked API's ``all_gather_object``), with the buffer sizes and
options accord's TCP transport uses, and one iteration of either row:

- ``tcp_limit``: each rank of a pair sends ``nbytes`` to the other and receives as many, both
  directions at once (non-blocking, epoll, each side written and read until the kernel says
  "no more now"). That is the traffic of a world-2 ring all_reduce of ``nbytes`` (each rank
  sends and receives S), so its bytes per direction per second compare with all_reduce's busbw.
- ``tcp_oneway``: the even rank sends ``nbytes``, the odd one receives them and answers one
  byte: the traffic of a world-2 broadcast, comparable with its busbw.

A rank without a partner (odd world) idles. Must not know about accord's transports or
reporting: no framing, no matching, only sockets.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable
from typing import Any

import numpy as np

from ..transport.bootstrap import set_buffers


def _tune(sock: socket.socket) -> None:
    """The options accord's own TCP links get: their buffer sizes, TCP_NODELAY."""
    set_buffers(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _pair(api: Any, rank: int, world: int) -> socket.socket | None:
    """This rank's connected socket to its partner (rank ^ 1), or None without one."""
    listener = None
    port = 0
    if rank % 2 == 0 and rank + 1 < world:
        listener = socket.socket()
        _tune(listener)  # buffer sizes before listen(): the accepted socket inherits them
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
    ports: list[Any] = [None] * world
    api.all_gather_object(ports, port)
    try:
        if listener is not None:
            sock, _ = listener.accept()
        elif rank % 2 == 1:
            sock = socket.socket()
            _tune(sock)
            sock.connect(("127.0.0.1", ports[rank - 1]))
        else:
            return None
    finally:
        if listener is not None:
            listener.close()
    _tune(sock)
    sock.setblocking(False)
    return sock


def exchange(sock: socket.socket, poller: Any, out: memoryview, into: memoryview) -> None:
    """Send all of ``out`` and receive ``into`` over ``sock`` at the same time."""
    sent = received = 0
    fd = sock.fileno()
    wanted = select.EPOLLIN | select.EPOLLOUT
    poller.modify(fd, wanted)
    while received < into.nbytes or sent < out.nbytes:
        poller.poll()
        try:
            while sent < out.nbytes:
                sent += sock.send(out[sent:])
        except BlockingIOError:
            pass
        try:
            while received < into.nbytes:
                got = sock.recv_into(into[received:])
                if got == 0:
                    raise ConnectionError("the partner closed the socket mid-exchange")
                received += got
        except BlockingIOError:
            pass
        if sent == out.nbytes and wanted & select.EPOLLOUT:
            wanted = select.EPOLLIN
            poller.modify(fd, wanted)


def one_way(sock: socket.socket, poller: Any, data: memoryview, sending: bool) -> None:
    """Send ``data`` (or receive it) over ``sock``, then the one-byte answer back."""
    if sending:
        exchange(sock, poller, data, memoryview(bytearray(1)))
    else:
        exchange(sock, poller, memoryview(b"k"), data)


def make_call(api: Any, op: str, nbytes: int, rank: int, world: int) -> Callable[[], None]:
    """One ``op`` ("tcp_limit" or "tcp_oneway") iteration of this rank over its pair's socket."""
    sock = _pair(api, rank, world)
    if sock is None:
        return lambda: None
    poller = select.epoll()
    poller.register(sock.fileno(), select.EPOLLIN)
    out = np.ones(nbytes, dtype=np.uint8).data.cast("B")
    into = np.zeros(nbytes, dtype=np.uint8).data.cast("B")
    if op == "tcp_oneway":
        return lambda: one_way(sock, poller, out if rank % 2 == 0 else into, rank % 2 == 0)
    return lambda: exchange(sock, poller, out, into)
