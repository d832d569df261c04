"""Fuzzing both wire protocols (issue 13 item 6): the rank-to-rank frames and the TCPStore's
requests (with accord's authentication in front). Truncated, oversized, reordered and random
bytes, split at random points: the receiver raises its protocol error or drops that
connection; it never crashes with anything else, never hangs, and never touches another
connection's data.

Sizes: ``FUZZ_CASES`` examples per property (1000 in the default run; 10,000 with
``pytest --long``); the live-socket properties run a tenth of that.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accord.errors import AuthenticationError, PeerError, ProtocolError, StoreLimitError
from accord.store import tcp_protocol as p
from accord.store.tcp_auth import AUTH, ServerGate, Verdict
from accord.store.tcp_server import TCPStoreServer
from accord.store.tcp_store import TCPStore
from accord.timeouts import Deadline
from accord.transport import handshake
from accord.transport.tcp import TcpMesh
from accord.transport.wire import (HEADER_SIZE, MAGIC, Fingerprint, FrameKind,
                                   pack_header, unpack_header)

LONG = os.environ.get("ACCORD_LONG_TESTS") == "1"
FUZZ_CASES = 10_000 if LONG else 1000
LIVE_CASES = FUZZ_CASES // 10
QUICK = settings(max_examples=FUZZ_CASES, deadline=None, derandomize=not LONG,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIVE = settings(max_examples=LIVE_CASES, deadline=None, derandomize=not LONG,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def _valid_requests() -> st.SearchStrategy[bytes]:
    key = st.binary(max_size=20)
    return st.one_of(
        key.map(lambda k: p.request(p.Command.GET, keys=[k])),
        st.tuples(key, st.binary(max_size=50)).map(lambda kv: p.request(p.Command.SET, keys=[kv[0]], values=[kv[1]])),
        st.tuples(key, st.integers(-5, 5)).map(lambda ki: p.request(p.Command.ADD, keys=[ki[0]], number=ki[1])),
        st.lists(key, max_size=3).map(lambda ks: p.request(p.Command.CHECK, keys=ks)),
        st.just(p.request(p.Command.GETNUMKEYS)),
        st.just(p.request(p.Command.PING, number=7)))


def _mutated(parts: list[bytes], data: st.DataObject) -> bytes:
    """Valid pieces, then one of: truncated, a byte flipped, a length blown up, reordered."""
    stream = b"".join(parts)
    how = data.draw(st.sampled_from(["as is", "truncate", "flip", "huge length", "shuffle"]))
    if how == "truncate" and stream:
        return stream[:data.draw(st.integers(0, len(stream) - 1))]
    if how == "flip" and stream:
        at = data.draw(st.integers(0, len(stream) - 1))
        return stream[:at] + bytes([stream[at] ^ data.draw(st.integers(1, 255))]) + stream[at + 1:]
    if how == "huge length" and len(stream) > 9:
        at = data.draw(st.integers(1, len(stream) - 8))
        return stream[:at] + struct.pack("<Q", data.draw(st.integers(1 << 20, 1 << 64 - 1))) + stream[at + 8:]
    if how == "shuffle":
        return b"".join(data.draw(st.permutations(parts)))
    return stream


def _splits(stream: bytes, data: st.DataObject) -> list[bytes]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]


# -- the store: sans-IO --------------------------------------------------------------------------
@QUICK
@given(data=st.data())
def test_the_request_decoder_takes_any_bytes(data):
    validate = p.request(p.Command.VALIDATE, number=p.MAGIC)
    parts = [validate, *data.draw(st.lists(_valid_requests(), max_size=5))]
    stream = data.draw(st.one_of(st.binary(max_size=300), st.just(None)))
    stream = _mutated(parts, data) if stream is None else stream
    whole = p.RequestDecoder()
    at_once = whole.feed(stream)
    pieces = p.RequestDecoder()
    in_pieces = []
    for chunk in _splits(stream, data):
        in_pieces += pieces.feed(chunk)
        if pieces.failed is not None:
            break  # the server drops the connection here
    assert in_pieces == at_once  # how the bytes are split changes nothing
    assert (whole.failed is None) == (pieces.failed is None)
    for decoder in (whole, pieces):
        if decoder.failed is not None:
            assert isinstance(decoder.failed, (ProtocolError, StoreLimitError))
            assert str(decoder.failed)  # it says why
            with pytest.raises(type(decoder.failed)):  # a failed stream stays failed
                decoder.feed(b"\x00" * 16)


@QUICK
@given(data=st.data(), secret=st.sampled_from([b"s", None]))
def test_the_authentication_gate_takes_any_bytes(data, secret):
    gate = ServerGate(secret)
    head = data.draw(st.sampled_from([b"", bytes([AUTH, 1]), bytes([AUTH])]))
    stream = head + data.draw(st.binary(max_size=120))
    verdict = Verdict.PENDING
    for chunk in _splits(stream, data):
        verdict, reply, rest = gate.feed(chunk)
        assert isinstance(reply, bytes) and isinstance(rest, bytes)
        if verdict is not Verdict.PENDING:
            break
    if verdict is Verdict.REFUSED:
        assert gate.why
    if verdict is Verdict.OPEN and secret is not None:
        pytest.fail("random bytes opened a gate that needs the secret")


# -- the store: a live server ----------------------------------------------------------------------
@pytest.fixture(scope="module", params=[None, "fuzz-secret"], ids=["open", "secret"])
def live_store(request):
    saved = os.environ.get("ACCORD_SECRET")
    if request.param:
        os.environ["ACCORD_SECRET"] = request.param
    else:
        os.environ.pop("ACCORD_SECRET", None)
    server = TCPStoreServer(0, host="127.0.0.1")
    honest = TCPStore("127.0.0.1", server.port, timeout=timedelta(seconds=10))
    honest.set("honest/key", b"intact")
    yield server, honest
    honest.close()
    server.close()
    if saved is None:
        os.environ.pop("ACCORD_SECRET", None)
    else:
        os.environ["ACCORD_SECRET"] = saved


@LIVE
@given(data=st.data())
def test_a_live_store_drops_bad_clients_and_serves_the_honest_one(live_store, data):
    server, honest = live_store
    validate = p.request(p.Command.VALIDATE, number=p.MAGIC)
    parts = [validate, *data.draw(st.lists(_valid_requests(), max_size=4))]
    stream = data.draw(st.one_of(st.binary(max_size=200), st.just(None)))
    stream = _mutated(parts, data) if stream is None else stream
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        for chunk in _splits(stream, data):
            try:
                sock.sendall(chunk)
            except OSError:  # the server dropped us mid-stream: that is allowed
                break
    assert server.running
    assert honest.get("honest/key") == b"intact"


# -- the transport: headers and the handshake --------------------------------------------------------
@QUICK
@given(raw=st.one_of(st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE),
                     st.tuples(st.integers(0, 255), st.integers(0, 255), st.binary(min_size=HEADER_SIZE - 4, max_size=HEADER_SIZE - 4))
                     .map(lambda t: MAGIC + bytes([t[0], t[1]]) + t[2])))
def test_any_header_decodes_or_is_a_protocol_error(raw):
    try:
        header = unpack_header(raw)
    except ProtocolError as exc:
        assert str(exc)
    else:
        assert header.kind in set(FrameKind) and header.nbytes <= 1 << 40


@QUICK
@given(data=st.data(), secret=st.sampled_from([b"s", None]))
def test_the_accepting_handshake_takes_any_bytes(data, secret):
    token = b"job/token"
    hello = handshake._frame(struct.pack("<III", 1, 2, data.draw(st.integers(0, 3)))
                             + data.draw(st.binary(min_size=0, max_size=40)) + token)
    stream = data.draw(st.one_of(st.binary(max_size=200), st.just(hello),
                                 st.just(hello[:data.draw(st.integers(0, len(hello)))])))
    a, b = socket.socketpair()
    try:
        a.settimeout(0.5)
        b.sendall(stream)
        b.shutdown(socket.SHUT_WR)
        try:
            peer = handshake.acceptor_side(a, 0, 2, token, secret)
        except (ProtocolError, AuthenticationError) as exc:
            assert str(exc)
        except OSError:  # it waited for a frame that never came: the caller's timeout
            pass
        else:
            assert secret is None and peer == 1  # only a HELLO without a secret gets through
    finally:
        a.close()
        b.close()


# -- the transport: a live mesh -------------------------------------------------------------------
def _frame(kind: int, group: int, tag: int, payload: bytes, count: int) -> bytes:
    fp = Fingerprint(0, 0, 8, count, -1)  # int64
    return pack_header(kind, group, 0, 0, tag, fp, len(payload)) + payload


@LIVE
@given(data=st.data())
def test_a_peer_sending_garbage_fails_alone_and_the_honest_peer_is_served(data):
    """Rank 0 of 3: rank 1 sends a valid p2p message on group 1 ([0, 1]); rank 2 sends
    anything on group 2 ([0, 2]). Rank 0 gets rank 1's message intact; its receive from rank
    2 ends (data, or an error naming rank 2) and nothing else is raised."""
    pairs = {peer: socket.socketpair() for peer in (1, 2)}
    mesh = TcpMesh(0, 3, {peer: pair[0] for peer, pair in pairs.items()})
    try:
        honest = mesh.open_channel(1, [0, 1])
        other = mesh.open_channel(2, [0, 2])
        expect = Fingerprint(0, 0, 8, 4, -1)
        got_honest = np.zeros(4, np.int64)
        got_other = np.zeros(4, np.int64)
        r1 = honest.irecv(1, FrameKind.P2P, 0, 0, 5, expect, memoryview(got_honest.view(np.uint8)), "honest")
        r2 = other.irecv(2, FrameKind.P2P, 0, 0, 5, expect, memoryview(got_other.view(np.uint8)), "fuzzed")
        valid = _frame(FrameKind.P2P, 2, 5, np.arange(4, dtype=np.int64).tobytes(), 4)
        garbage = _mutated([valid, _frame(FrameKind.P2P, 2, 6, b"x" * 8, 1),
                            _frame(FrameKind.POISON, 2, 0, b"why", 0)], data)
        garbage = data.draw(st.one_of(st.just(garbage), st.binary(max_size=200)))
        sender = pairs[2][1]
        sender.setblocking(False)
        try:
            sender.send(garbage)
        except BlockingIOError:
            pass
        sender.shutdown(socket.SHUT_WR)  # whatever it sent, it says no more
        pairs[1][1].sendall(_frame(FrameKind.P2P, 1, 5, (np.arange(4, dtype=np.int64) * 7).tobytes(), 4))
        honest.wait([r1], Deadline.after(5), "honest")
        assert (got_honest == np.arange(4) * 7).all()
        started = time.monotonic()
        try:
            other.wait([r2], Deadline.after(5), "fuzzed")
        except (PeerError, ProtocolError) as exc:
            assert "rank 2" in str(exc)
        except Exception as exc:  # noqa: BLE001 — what the property forbids
            raise AssertionError(f"rank 2's bytes raised {type(exc).__name__}: {exc}") from exc
        assert time.monotonic() - started < 4.0  # ended by the stream's end, not by a timeout
    finally:
        mesh.close()
        for a, b in pairs.values():
            a.close()
            b.close()
