"""Which unauthenticated store clients a launcher lets in: its own workers' processes.

Owns: telling, on Linux, which process holds the other end of an accepted loopback TCP
connection (its socket's inode from ``/proc/net/tcp`` and ``tcp6``, then the descendants of the
launcher whose descriptors point at it). A job with a secret needs this for torch programs:
torch's TCPStore client cannot authenticate, so the workers' store admits a client that does
not if it is a process this launcher started (or one of theirs); anyone else must prove the
secret. Must not know the store's protocol.

Elsewhere than Linux, or when ``/proc`` cannot tell, nobody is admitted without the secret.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

_PROC = "/proc"


def descendants_checker(root: int) -> Callable[[socket.socket], bool]:
    """``admit(sock)``: whether the client of ``sock`` is ``root`` or one of its descendants."""

    def admit(sock: socket.socket) -> bool:
        try:
            inode = _client_inode(sock)
            return inode is not None and _held_by_descendant(inode, root)
        except OSError:
            return False

    return admit


def _hex_address(host: str, port: int) -> str:
    """How /proc/net/tcp{,6} writes an address: the address in the kernel's byte order."""
    packed = socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    return "".join(w[::-1].hex().upper() for w in words) + f":{port:04X}"


def _client_inode(sock: socket.socket) -> int | None:
    """The inode of the client's socket (the client's local address is our peer)."""
    peer, mine = sock.getpeername()[:2], sock.getsockname()[:2]
    wanted = {(_hex_address(*peer), _hex_address(*mine))}
    if peer[0].startswith("::ffff:"):  # an IPv4 client on a dual-stack server
        wanted.add((_hex_address(peer[0][7:], peer[1]), _hex_address(mine[0][7:], mine[1])))
    elif ":" not in peer[0]:  # an IPv4 server: the client may be a dual-stack IPv6 socket
        wanted.add((_hex_address("::ffff:" + peer[0], peer[1]), _hex_address("::ffff:" + mine[0], mine[1])))
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(_PROC, "net", table), encoding="ascii") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if (fields[1], fields[2]) in wanted:
                        return int(fields[9])
        except FileNotFoundError:
            continue
    return None


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(_PROC, name, "stat"), encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # after "(comm) state"
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _held_by_descendant(inode: int, root: int) -> bool:
    target = f"socket:[{inode}]"
    tree, todo, seen = _children(), [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(tree.get(pid, ()))
        if pid == root:
            continue  # the launcher's own clients authenticate
        folder = os.path.join(_PROC, str(pid), "fd")
        try:
            for fd in os.listdir(folder):
                try:
                    if os.readlink(os.path.join(folder, fd)) == target:
                        return True
                except OSError:
                    continue
        except OSError:
            continue
    return False
