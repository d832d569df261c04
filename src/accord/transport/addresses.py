"""Which address this host publishes for its peers, and what identifies "this host".

Owns: interface lookup (ACCORD_SOCKET_IFNAME / GLOO_SOCKET_IFNAME), the choice of a default
address, and ``host_identity`` (equal strings mean two ranks can share memory). Must not know
about groups or algorithms.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

from .. import config

_SIOCGIFADDR = 0x8915


def interface_address(ifname: str) -> str:
    """The IPv4 address of a network interface.

    Raises:
        ValueError: no such interface, or it has no IPv4 address; the message lists the
            interfaces that exist.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            known = ", ".join(name for _, name in socket.if_nameindex())
            raise ValueError(
                f"ACCORD_SOCKET_IFNAME/GLOO_SOCKET_IFNAME names interface {ifname!r}, which does "
                f"not exist or has no IPv4 address here; interfaces: {known}"
            ) from None
    return socket.inet_ntoa(packed[20:24])


def default_route_address() -> str | None:
    """The source address the kernel would use for outside traffic (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return str(probe.getsockname()[0])
        except OSError:
            return None


def choose_address(store_address: str | None) -> str:
    """The address to bind and publish: the named interface, else the one that reaches the
    store, else the default route's, else loopback (single-host jobs)."""
    ifname = config.socket_ifname()
    if ifname is not None:
        return interface_address(ifname)
    if store_address:
        return store_address
    return default_route_address() or "127.0.0.1"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def host_identity() -> str:
    """Equal on two processes exactly when they can map each other's shared memory.

    Boot id and hostname tell machines apart; the network namespace tells apart the
    namespaced "hosts" that tests build on one machine; the IPC namespace separates containers.
    """
    parts = [socket.gethostname(), _read("/proc/sys/kernel/random/boot_id")]
    for ns in ("net", "ipc"):
        try:
            parts.append(f"{ns}:{os.stat(f'/proc/self/ns/{ns}').st_ino}")
        except OSError:
            parts.append(f"{ns}:?")
    return "/".join(parts)
