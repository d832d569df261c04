"""One contract, every transport: the same tests over the loopback fabric and over TCP meshes
joined by socket pairs in one process (ranks are threads; no store, no bootstrap)."""

from __future__ import annotations

import socket
import threading
from typing import Callable

import numpy as np
import pytest

from accord.errors import CollectiveMismatchError, DistTimeoutError, PeerError
from accord.timeouts import Deadline
from accord.transport.loopback import LoopbackFabric
from accord.transport.mesh import Mesh
from accord.transport.shm_ring import RingReader, RingWriter
from accord.transport.tcp import TcpMesh
from accord.transport.wire import Fingerprint, FrameKind

COLL, P2P = FrameKind.COLL, FrameKind.P2P
FP = Fingerprint(3, 1, 12, 4, -1)


def loopback_meshes(n: int) -> tuple[list[Mesh], Callable[[int], None]]:
    fabric = LoopbackFabric(n)
    return [fabric.mesh(r) for r in range(n)], fabric.kill


def tcp_meshes(n: int) -> tuple[list[Mesh], Callable[[int], None]]:
    socks: list[dict[int, socket.socket]] = [{} for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            socks[a][b], socks[b][a] = socket.socketpair()
    meshes = [TcpMesh(r, n, socks[r]) for r in range(n)]

    def kill(rank: int) -> None:  # vanish without GOODBYE, as a killed process does
        meshes[rank].begin_close()
        for sock in socks[rank].values():
            sock.close()

    return meshes, kill


def ring_meshes(n: int) -> tuple[list[Mesh], Callable[[int], None]]:
    """TCP meshes whose frames go through rings (in this process's memory: ranks are threads);
    the sockets stay for end-of-stream, as between the processes of one host."""
    capacity = 256 << 10  # small: large messages wrap around many times
    buffers = {(a, b): memoryview(bytearray(128 + capacity)) for a in range(n) for b in range(n) if a != b}
    rings = [{b: (RingWriter(buffers[a, b], capacity), RingReader(buffers[b, a], capacity))
              for b in range(n) if b != a} for a in range(n)]
    socks: list[dict[int, socket.socket]] = [{} for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            socks[a][b], socks[b][a] = socket.socketpair()
    meshes = [TcpMesh(r, n, socks[r], rings=rings[r]) for r in range(n)]

    def kill(rank: int) -> None:
        meshes[rank].begin_close()
        for sock in socks[rank].values():
            sock.close()

    return meshes, kill


@pytest.fixture(params=["loopback", "tcp", "tcp+rings"])
def make(request):
    factory = {"loopback": loopback_meshes, "tcp": tcp_meshes, "tcp+rings": ring_meshes}[request.param]
    made: list[Mesh] = []

    def build(n: int):
        meshes, kill = factory(n)
        made.extend(meshes)
        return meshes, kill

    yield build
    for mesh in made:
        mesh.close()


def channels(meshes, group=0):
    return [m.open_channel(group, range(len(meshes))) for m in meshes]


def soon(seconds: float = 5.0) -> Deadline:
    return Deadline.after(seconds)


def run_threads(*fns):
    errors: list[BaseException] = []

    def wrap(fn):
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]


def test_small_and_empty_messages(make):
    meshes, _ = make(2)
    a, b = channels(meshes)
    for payload in (b"", b"x", bytes(range(200))):
        sent = a.isend(1, P2P, 0, 0, 7, FP, memoryview(payload), "s")
        out = bytearray(len(payload))
        got = b.irecv(0, P2P, 0, 0, 7, FP, memoryview(out), "r")
        b.wait([got], soon(), "r")
        a.wait([sent], soon(), "s")
        assert bytes(out) == payload and got.source == 0


def test_large_exchange_both_ways_at_once_does_not_deadlock(make):
    meshes, _ = make(2)
    chans = channels(meshes)
    size = 24 << 20  # far beyond socket buffers
    data = [np.full(size, r + 1, dtype=np.uint8) for r in range(2)]
    out = [np.zeros(size, dtype=np.uint8) for _ in range(2)]

    def rank(r):
        def run():
            recv = chans[r].irecv(1 - r, COLL, 1, 0, 0, FP, memoryview(out[r]), "x")
            send = chans[r].isend(1 - r, COLL, 1, 0, 0, FP, memoryview(data[r]), "x")
            chans[r].wait([recv, send], soon(20), "x")
        return run

    run_threads(rank(0), rank(1))
    assert (out[0] == 2).all() and (out[1] == 1).all()


def test_frames_that_arrive_early_are_parked_then_delivered(make):
    meshes, _ = make(2)
    a, b = channels(meshes)
    sends = [a.isend(1, COLL, seq, 0, 0, FP, memoryview(bytes([seq]) * 1000), "s") for seq in range(1, 6)]
    a.wait(sends, soon(), "s")
    for seq in reversed(range(1, 6)):
        out = bytearray(1000)
        req = b.irecv(0, COLL, seq, 0, 0, FP, memoryview(out), "r")
        b.wait([req], soon(), "r")
        assert out == bytes([seq]) * 1000


def test_any_source_and_tag_fifo(make):
    meshes, _ = make(3)
    chans = channels(meshes)
    for src in (1, 2):
        for i in range(3):
            chans[src].wait([chans[src].isend(0, P2P, 0, 0, 9, FP, memoryview(bytes([src * 10 + i])), "s")],
                            soon(), "s")
    seen = []
    for _ in range(6):
        out = bytearray(1)
        req = chans[0].irecv(None, P2P, 0, 0, 9, FP, memoryview(out), "r")
        chans[0].wait([req], soon(), "r")
        seen.append((req.source, out[0]))
    assert sorted(seen) == [(1, 10), (1, 11), (1, 12), (2, 20), (2, 21), (2, 22)]
    for src in (1, 2):
        assert [v for s, v in seen if s == src] == sorted(v for s, v in seen if s == src)


def test_size_and_fingerprint_mismatches_are_errors(make):
    meshes, _ = make(2)
    a, b = channels(meshes)
    a.wait([a.isend(1, COLL, 1, 0, 0, FP, memoryview(b"12345678"), "s")], soon(), "s")
    req = b.irecv(0, COLL, 1, 0, 0, FP, memoryview(bytearray(4)), "r")
    with pytest.raises(CollectiveMismatchError, match="8-byte"):
        b.wait([req], soon(), "r")
    a.wait([a.isend(1, COLL, 2, 0, 0, Fingerprint(2, 1, 12, 4, 0), memoryview(b"1234"), "s")], soon(), "s")
    req = b.irecv(0, COLL, 2, 0, 0, FP, memoryview(bytearray(4)), "r")
    with pytest.raises(CollectiveMismatchError, match="rank 0 called"):
        b.wait([req], soon(), "r")


def test_timeout_names_the_silent_peer(make):
    meshes, _ = make(2)
    _, b = channels(meshes)
    req = b.irecv(0, COLL, 1, 0, 0, FP, memoryview(bytearray(1)), "all_reduce #1 on rank 1")
    with pytest.raises(DistTimeoutError, match="all_reduce #1 on rank 1: Timed out after 200 ms: nothing from rank 0"):
        b.wait([req], Deadline.after(0.2), "all_reduce #1 on rank 1")


def test_goodbye_lets_queued_data_through_then_refuses(make):
    meshes, _ = make(2)
    a, b = channels(meshes)
    a.wait([a.isend(1, P2P, 0, 0, 0, FP, memoryview(b"last"), "s")], soon(), "s")
    meshes[0].close()
    out = bytearray(4)
    req = b.irecv(0, P2P, 0, 0, 0, FP, memoryview(out), "r")
    b.wait([req], soon(), "r")
    assert out == b"last"
    with pytest.raises(PeerError, match="left"):
        late = b.irecv(0, P2P, 0, 0, 0, FP, memoryview(bytearray(4)), "r")
        b.wait([late], soon(), "r")
    assert b.error is None  # leaving is not a failure of the group


def test_a_dead_peer_fails_every_wait_on_groups_that_contain_it(make):
    meshes, kill = make(3)
    chans = channels(meshes)
    pair = meshes[0].open_channel(7, [0, 1])  # a group without rank 2
    req = chans[0].irecv(1, COLL, 1, 0, 0, FP, memoryview(bytearray(1)), "all_reduce #1 on rank 0")
    threading.Timer(0.1, kill, args=(2,)).start()
    with pytest.raises(PeerError, match="rank 2"):
        chans[0].wait([req], soon(), "all_reduce #1 on rank 0")
    assert pair.error is None


def test_poison_breaks_the_group_on_the_peers(make):
    meshes, _ = make(2)
    a, b = channels(meshes)
    a.fail(DistTimeoutError("all_reduce #3 on rank 0: nothing from rank 5"), notify_peers=True)
    with pytest.raises(PeerError, match="rank 1: rank 0 reported a failure.*nothing from rank 5"):
        req = b.irecv(0, COLL, 3, 0, 0, FP, memoryview(bytearray(1)), "all_reduce #3 on rank 1")
        b.wait([req], soon(), "all_reduce #3 on rank 1")


def test_groups_on_one_mesh_do_not_see_each_others_frames(make):
    meshes, _ = make(2)
    a1, b1 = channels(meshes, group=1)
    a2, b2 = channels(meshes, group=2)
    a1.wait([a1.isend(1, COLL, 1, 0, 0, FP, memoryview(b"1"), "s")], soon(), "s")
    a2.wait([a2.isend(1, COLL, 1, 0, 0, FP, memoryview(b"2"), "s")], soon(), "s")
    out2, out1 = bytearray(1), bytearray(1)
    b2.wait([b2.irecv(0, COLL, 1, 0, 0, FP, memoryview(out2), "r")], soon(), "r")
    b1.wait([b1.irecv(0, COLL, 1, 0, 0, FP, memoryview(out1), "r")], soon(), "r")
    assert (out1, out2) == (b"1", b"2")


def test_a_receive_of_unknown_size_takes_any_message(make):
    meshes, _ = make(2)
    a, b = channels(meshes)
    early = bytes(range(256)) * 256  # parked before the receive is posted: handed over
    a.wait([a.isend(1, COLL, 1, 0, 0, FP, memoryview(early), "s")], soon(), "s")
    req = b.irecv(0, COLL, 1, 0, 0, FP, None, "r")
    b.wait([req], soon(), "r")
    assert bytes(req.buf) == early
    late = b.irecv(0, COLL, 1, 1, 0, FP, None, "r")  # posted first: allocated on arrival
    a.wait([a.isend(1, COLL, 1, 1, 0, FP, memoryview(b"xyz"), "s")], soon(), "s")
    b.wait([late], soon(), "r")
    assert bytes(late.buf) == b"xyz"
