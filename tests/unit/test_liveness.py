"""The socket options and the kernel's word behind ACCORD_PEER_LOST_TIMEOUT (transport/liveness.py),
on real loopback sockets. A host that goes silent is tested end to end in network namespaces
(tests/launcher/test_host_loss.py); here: the options land on the socket, and a living peer
that stops reading (zero window: the case TCP_USER_TIMEOUT would wrongly end) never counts as
silent."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from accord import config
from accord.transport import liveness

pytestmark = pytest.mark.skipif(not liveness.available(), reason="needs Linux's keepalive options and TCP_INFO")


@pytest.fixture
def pair():
    """A connected loopback pair (client, server side)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    yield client, server
    client.close()
    server.close()


@pytest.mark.parametrize("budget", [2, 2.5, 3, 7, 10, 30, 120])
def test_probe_timers_fit_the_budget(budget):
    idle, interval, count = liveness.probe_timers(budget)
    # a living peer is probed, and answers, well before the budget runs out ...
    assert idle + interval < budget or (budget == 2 and idle == interval == 1)
    # ... and the kernel gives up on a silent one just after it, should nobody look sooner
    assert budget < idle + count * interval <= budget + interval


def test_keep_alive_sets_the_options(pair):
    client, _ = pair
    assert liveness.keep_alive(client, 7.0)
    idle, interval, count = liveness.probe_timers(7.0)
    assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle
    assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == interval
    assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == count
    # TCP_USER_TIMEOUT would end a link whose living peer stopped reading: never set
    assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 0


def test_keep_alive_off():
    with socket.socket() as sock:
        assert not liveness.keep_alive(sock, 0)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0


def test_an_idle_link_to_a_living_peer_is_not_silent(pair):
    client, server = pair
    client.sendall(b"x" * 1000)
    assert server.recv(1000)
    time.sleep(0.05)
    assert liveness.unanswered_ms(client) == 0


def test_a_living_peer_that_stops_reading_is_never_silent_for_long(pair):
    """The peer reads nothing: the window shuts, our data waits, the kernel probes the window
    and the peer's kernel answers. Nothing stays unanswered as long as the shortest budget
    allowed (2 s; about 1.2 s at worst: the peer's kernel answers the first, closely spaced,
    probes at most once per 500 ms), and the link stays up."""
    client, _ = pair
    client.setblocking(False)
    sent = 0
    try:
        while True:
            sent += client.send(b"x" * 65536)
    except BlockingIOError:
        pass
    assert sent > 0
    worst, until = 0, time.monotonic() + 2.5
    while time.monotonic() < until:
        worst = max(worst, liveness.unanswered_ms(client))
        time.sleep(0.02)
    assert worst < 2000, worst
    assert client.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0


def test_unanswered_ms_of_a_closed_socket_is_zero():
    sock = socket.socket()
    sock.close()
    assert liveness.unanswered_ms(sock) == 0


class Kernel:
    """What TCP_INFO says about one socket, set by the test: the rule in SilentPeers on its
    own (the real kernel's answers are the namespace tests')."""

    def __init__(self) -> None:
        self.probes = self.unacked = self.last_ack_ms = 0

    def getsockopt(self, level: int, option: int, buflen: int) -> bytes:
        info = bytearray(buflen)
        info[3] = self.probes
        struct.pack_into("=I", info, 24, self.unacked)
        struct.pack_into("=I", info, 56, self.last_ack_ms)
        return bytes(info)


def test_a_host_silent_for_the_budget_is_lost_on_the_look_that_sees_it():
    kernel, rule = Kernel(), liveness.SilentPeers(budget=7.0, confirm=0.5)
    kernel.unacked = 3  # data in flight since t=0, nothing acknowledged after
    for now in (0.25, 0.75, 3.25, 6.75):
        kernel.last_ack_ms = int(now * 1000)
        assert rule.lost_after(1, kernel, now) == 0.0
    kernel.last_ack_ms = 7250
    assert rule.lost_after(1, kernel, 7.25) == pytest.approx(7.25)


def test_a_probe_that_just_left_after_a_quiet_minute_is_not_silence():
    """A window shut for a minute is probed about once a minute: for a round trip the probe is
    unanswered and the last acknowledgement a minute old. Seen once, that is not a loss; the
    next look finds it answered."""
    kernel, rule = Kernel(), liveness.SilentPeers(budget=7.0, confirm=0.5)
    kernel.probes, kernel.last_ack_ms = 1, 60_000
    assert rule.lost_after(1, kernel, 100.0) == 0.0
    kernel.probes, kernel.last_ack_ms = 0, 500  # answered
    assert rule.lost_after(1, kernel, 100.5) == 0.0
    kernel.probes, kernel.last_ack_ms = 1, 60_000  # the next probe, a minute on
    assert rule.lost_after(1, kernel, 160.0) == 0.0
    kernel.last_ack_ms = 60_500  # ... and this one went unanswered: the host is gone
    assert rule.lost_after(1, kernel, 160.5) == pytest.approx(60.5)


def test_an_answer_between_two_looks_starts_the_count_again():
    kernel, rule = Kernel(), liveness.SilentPeers(budget=2.0, confirm=0.5)
    kernel.unacked, kernel.last_ack_ms = 1, 2500
    assert rule.lost_after(1, kernel, 10.0) == 0.0
    kernel.last_ack_ms = 2100  # acknowledged at 8.9 s, not 7.5 s: another silence
    assert rule.lost_after(1, kernel, 11.0) == 0.0
    kernel.last_ack_ms = 2600
    assert rule.lost_after(1, kernel, 11.5) == pytest.approx(2.6)
    assert rule.lost_after(2, Kernel(), 11.5) == 0.0  # links are judged one by one


def test_the_budget_variable(monkeypatch):
    monkeypatch.delenv("ACCORD_PEER_LOST_TIMEOUT", raising=False)
    assert config.peer_lost_timeout() == 7.0
    monkeypatch.setenv("ACCORD_PEER_LOST_TIMEOUT", "0")
    assert config.peer_lost_timeout() == 0.0
    monkeypatch.setenv("ACCORD_PEER_LOST_TIMEOUT", "2.5")
    assert config.peer_lost_timeout() == 2.5
    for bad in ("1", "-1", "soon"):
        monkeypatch.setenv("ACCORD_PEER_LOST_TIMEOUT", bad)
        with pytest.raises(ValueError, match="ACCORD_PEER_LOST_TIMEOUT"):
            config.peer_lost_timeout()
