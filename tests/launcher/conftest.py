"""Fixtures of the launcher tests: launchers that are always killed, and two namespaced hosts."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from .running import Launched, accordrun


@pytest.fixture
def launch():
    """``launch(*args, **kwargs)`` starts ``python -m accord.run`` (see running.accordrun);
    whatever is still running at the end of the test is SIGKILLed."""
    started: list[Launched] = []

    def start(*args: str, **kwargs) -> Launched:  # noqa: ANN003
        launched = accordrun(*args, **kwargs)
        started.append(launched)
        return launched

    yield start
    for launched in started:
        launched.kill()


@dataclass(frozen=True)
class Host:
    """One network namespace: its name, the veth on the rendezvous network and its address,
    and the veth on the data network (where the TCP transport must go) and its address."""

    netns: str
    rdzv_if: str
    rdzv_addr: str
    data_if: str
    data_addr: str

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _build(tag: str) -> tuple[Host, Host]:
    """Two namespaces joined by two veth pairs: 10.231.1.0/24 (rendezvous) and 10.231.2.0/24
    (data). Namespaces are isolated, so fixed subnets cannot clash with the host's."""
    hosts = []
    for side, index in (("a", 1), ("b", 2)):
        hosts.append(Host(f"acc{tag}{side}", f"r{tag}{side}", f"10.231.1.{index}",
                          f"d{tag}{side}", f"10.231.2.{index}"))
    a, b = hosts
    for host in hosts:
        _ip("netns", "add", host.netns)
    for pick in (lambda h: h.rdzv_if, lambda h: h.data_if):
        _ip("link", "add", pick(a), "type", "veth", "peer", "name", pick(b))
    for host in hosts:
        for ifname, addr in ((host.rdzv_if, host.rdzv_addr), (host.data_if, host.data_addr)):
            _ip("link", "set", ifname, "netns", host.netns)
            _ip("-n", host.netns, "addr", "add", f"{addr}/24", "dev", ifname)
            _ip("-n", host.netns, "link", "set", ifname, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
    return a, b


def _destroy(tag: str) -> None:
    for side in ("a", "b"):
        subprocess.run(["ip", "netns", "del", f"acc{tag}{side}"], capture_output=True, timeout=20)
    for name in (f"r{tag}a", f"d{tag}a"):  # in case they never moved into a namespace
        subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=20)


@pytest.fixture(scope="module")
def two_hosts():
    """Two "hosts" (network namespaces) that reach each other over two veth networks."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("network namespaces need iproute2's `ip` command")
    tag = str(os.getpid() % 100000)
    try:
        hosts = _build(tag)
    except (subprocess.CalledProcessError, OSError) as exc:
        _destroy(tag)
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"cannot build network namespaces here: {exc} {detail.decode().strip()}")
    try:
        yield hosts
    finally:
        _destroy(tag)
