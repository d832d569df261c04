"""Whether a peer's host still answers: keepalive on rank-to-rank sockets, and the kernel's
word on how long a peer has left us unanswered.

Owns: the socket options that ``ACCORD_PEER_LOST_TIMEOUT`` asks for (``keep_alive``:
SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT), reading a socket's TCP_INFO
(``unanswered_ms``) and the rule that calls a peer host lost (``SilentPeers``). Must not know
about frames, meshes or groups: ``tcp.py`` asks, and fails the link.

A host that vanishes without closing its connections (power loss, a pulled cable, a
partition) sends no FIN or RST: a send into the black hole succeeds and a receive just
waits. What does answer while the host lives is its *kernel*: it acknowledges data and
keepalive probes even when the process is stopped (SIGSTOP, a debugger) or busy. So silence
of the peer's kernel names a lost host, and a frozen but living process is still waited
for until the call's timeout.

Why not TCP_USER_TIMEOUT: on Linux it also ends a connection whose peer merely stopped
reading (zero window) once that lasted the timeout, though the peer's kernel answers every
window probe (measured: a loopback peer that does not read, TCP_USER_TIMEOUT=2000, errors
with ETIMEDOUT after 2.5 s). A slow or frozen receiver of a large message is not a lost host.

So the kernel's keepalive probes idle links (and ends one within a probe interval after the
budget of silence, even if nobody looks), and the transport judges every link while it
waits: the peer's kernel has something of ours unanswered (data in flight, or a keepalive
or window probe) and has acknowledged nothing for the budget. A living kernel answers within
a round trip (a lost segment is sent again, at growing intervals: a network outage shorter
than about half the budget is survived), and a zero window's probes, once answered, leave
nothing unanswered however long the receiver keeps it shut. A peer whose window has been
shut for minutes is probed rarely (the kernel's backoff, up to two minutes): its host's
loss is found at the next probe, or by the call's timeout.
"""

from __future__ import annotations

import math
import socket
import struct
from typing import Protocol

#: struct tcp_info (linux/tcp.h), the fields read here: tcpi_probes (u8 at 3: unanswered
#: keepalive or zero-window probes), tcpi_unacked (u32 at 24: segments in flight),
#: tcpi_last_ack_recv (u32 at 56: milliseconds since the peer last acknowledged anything).
_TCP_INFO_BYTES = 104
_PROBES = 3
_U32 = struct.Struct("=I")
_UNACKED_AT = 24
_LAST_ACK_RECV_AT = 56
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_KEEPALIVE_OPTIONS = ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT")
#: Two looks whose "last acknowledgement" instants differ by less than this saw the same
#: silence (the kernel counts in jiffies; two clocks are read).
_SAME_ACK_S = 0.05


class TcpSocket(Protocol):
    def getsockopt(self, level: int, option: int, buflen: int) -> bytes: ...


def available() -> bool:
    """Whether this platform has the options and TCP_INFO (Linux)."""
    return _TCP_INFO is not None and all(hasattr(socket, name) for name in _KEEPALIVE_OPTIONS)


def probe_timers(budget: float) -> tuple[int, int, int]:
    """(idle, interval, count) in whole seconds for a link found lost after ``budget`` s of
    silence: the first probe after a third of the budget, then one every sixth, and enough
    probes that the kernel gives up on its own within one interval after the budget."""
    idle = max(1, int(budget // 3))
    interval = max(1, int(budget // 6))
    count = max(1, math.floor((budget - idle) / interval) + 1)
    return idle, interval, count


def keep_alive(sock: socket.socket, budget: float) -> bool:
    """Turn on keepalive probes sized for ``budget`` seconds (see ``probe_timers``); False
    where the platform lacks them (then only the transport's own check, if any, applies)."""
    if budget <= 0 or not available():
        return False
    idle, interval, count = probe_timers(budget)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    except OSError:
        return False
    return True


def unanswered_ms(sock: TcpSocket) -> int:
    """Milliseconds since the peer's kernel last acknowledged anything, if something of ours
    is waiting for its answer now (data in flight, an unanswered probe); else 0. Also 0 when
    the kernel cannot say (no TCP_INFO, a closed socket)."""
    if _TCP_INFO is None:
        return 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_BYTES)
    except OSError:
        return 0
    if len(info) < _LAST_ACK_RECV_AT + 4:
        return 0
    waiting = info[_PROBES] or _U32.unpack_from(info, _UNACKED_AT)[0]
    return _U32.unpack_from(info, _LAST_ACK_RECV_AT)[0] if waiting else 0


class SilentPeers:
    """Which links' peer hosts are lost: something of ours unanswered, nothing acknowledged
    for ``budget`` seconds, and that same silence seen by two looks at least ``confirm``
    seconds apart. One look is not enough: a probe or a send that just left, after a long
    quiet spell (a window shut for a minute is probed about once a minute), is unanswered
    for a round trip even by a living kernel."""

    def __init__(self, budget: float, confirm: float) -> None:
        self.budget = budget
        self.confirm = confirm
        self._streaks: dict[int, tuple[float, float]] = {}  # key → (first seen, acknowledged at)

    def lost_after(self, key: int, sock: TcpSocket, now: float) -> float:
        """Seconds of silence of the host behind ``sock`` if it is lost now, else 0."""
        silent_s = unanswered_ms(sock) / 1000
        if not silent_s:
            self._streaks.pop(key, None)
            return 0.0
        acked_at = now - silent_s
        streak = self._streaks.get(key)
        if streak is None or abs(acked_at - streak[1]) > _SAME_ACK_S:
            self._streaks[key] = (now, acked_at)  # a new silence (or an answer came between)
            return 0.0
        if silent_s >= self.budget and now - streak[0] >= self.confirm:
            return silent_s
        return 0.0
