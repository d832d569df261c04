"""The TCPStore wire codec: round trips, arbitrary chunking, and rejection of bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.errors import ProtocolError
from accord.store import tcp_protocol as p

REQUESTS = [
    p.Hello(p.VERSION, True),
    p.SetRequest("k", b"v\x00"),
    p.GetRequest("ключ", 1.5),
    p.AddRequest("n", -(2**63)),
    p.CompareSetRequest("k", b"", b"new"),
    p.WaitRequest(("a", "b"), 0.0),
    p.CheckRequest(()),
    p.DeleteKeyRequest("k"),
    p.NumKeysRequest(),
    p.AppendRequest("k", b"more"),
    p.MultiGetRequest(("x", "y", ""), 300.0),
    p.MultiSetRequest(("x", "y"), (b"1", b"")),
    p.QueuePushRequest("q", b"item"),
    p.QueuePopRequest("q", False, 0.25),
    p.QueueLenRequest("q"),
    p.ListKeysRequest(),
    p.WaitWorkersRequest(8, 30.0),
]
RESPONSES = [
    p.OkResponse(),
    p.ValueResponse(b"\xff" * 3),
    p.IntResponse(2**63 - 1),
    p.BoolResponse(False),
    p.ValuesResponse((b"a", b"", b"c")),
    p.KeysResponse(("k1", "k2")),
    p.TimeoutResponse(("missing",)),
    p.ErrorResponse(p.ERR_STORE, "add('w'): not an integer"),
]


def test_every_message_type_is_covered() -> None:
    assert {type(m) for m in REQUESTS} == set(p.REQUESTS.values())
    assert {type(m) for m in RESPONSES} == set(p.RESPONSES.values())


def _requests_stream() -> bytes:
    return b"".join(p.encode_request(m) for m in REQUESTS)


@pytest.mark.parametrize("message", RESPONSES, ids=lambda m: type(m).__name__)
def test_response_round_trip(message: object) -> None:
    assert p.FrameDecoder(requests=False).feed(p.encode_response(message)) == [message]


@pytest.mark.parametrize("index", range(1, len(REQUESTS)), ids=lambda i: type(REQUESTS[i]).__name__)
def test_request_round_trip(index: int) -> None:
    frames = p.encode_request(REQUESTS[0]) + p.encode_request(REQUESTS[index])
    assert p.FrameDecoder(requests=True).feed(frames) == [REQUESTS[0], REQUESTS[index]]


def test_stream_split_at_every_byte() -> None:
    stream = _requests_stream()
    for cut in range(len(stream) + 1):
        decoder = p.FrameDecoder(requests=True)
        messages = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert messages == REQUESTS, cut
        assert decoder.buffered == 0


def test_stream_fed_one_byte_at_a_time() -> None:
    decoder = p.FrameDecoder(requests=False)
    stream = b"".join(p.encode_response(m) for m in RESPONSES)
    messages = [m for i in range(len(stream)) for m in decoder.feed(stream[i:i + 1])]
    assert messages == RESPONSES


_text = st.text(max_size=20)
_blob = st.binary(max_size=64)
_seconds = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_any_request = st.one_of(
    st.builds(p.SetRequest, _text, _blob),
    st.builds(p.GetRequest, _text, _seconds),
    st.builds(p.AddRequest, _text, _int64),
    st.builds(p.CompareSetRequest, _text, _blob, _blob),
    st.builds(p.WaitRequest, st.lists(_text, max_size=4).map(tuple), _seconds),
    st.builds(p.MultiSetRequest, st.lists(_text, max_size=4).map(tuple),
              st.lists(_blob, max_size=4).map(tuple)),
    st.builds(p.QueuePopRequest, _text, st.booleans(), _seconds),
    st.builds(p.WaitWorkersRequest, _int64, _seconds),
    st.builds(p.NumKeysRequest),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_any_request, max_size=6), st.lists(st.integers(0, 200), max_size=8))
def test_round_trip_property(messages: list, cuts: list[int]) -> None:
    stream = b"".join(p.encode_request(m) for m in [p.Hello(p.VERSION, False), *messages])
    decoder = p.FrameDecoder(requests=True)
    decoded, start = [], 0
    for cut in sorted(c % (len(stream) + 1) for c in cuts) + [len(stream)]:
        decoded += decoder.feed(stream[start:cut])
        start = max(start, cut)
    assert decoded == [p.Hello(p.VERSION, False), *messages]


# -- rejection ---------------------------------------------------------------------------------
def _after_hello(frame: bytes) -> bytes:
    return p.encode_request(p.Hello(p.VERSION, True)) + frame


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\n\r\n", b"\x00" * 16, b"A\x00"])
def test_garbage_raises(garbage: bytes) -> None:
    with pytest.raises(ProtocolError, match="magic"):
        p.FrameDecoder(requests=True).feed(garbage)


def test_oversized_frame_raises_from_the_header_alone() -> None:
    decoder = p.FrameDecoder(requests=True, max_frame_bytes=1024)
    header = p.HEADER.pack(p.MAGIC, p.VERSION, p.SetRequest.OP, 1025)
    with pytest.raises(ProtocolError, match="limit"):
        decoder.feed(_after_hello(header))


def test_default_limit_is_one_gib() -> None:
    header = p.HEADER.pack(p.MAGIC, p.VERSION, p.SetRequest.OP, (1 << 30) + 1)
    with pytest.raises(ProtocolError, match="limit"):
        p.FrameDecoder(requests=True).feed(_after_hello(header))


def test_encoder_refuses_frames_above_the_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        p.encode_request(p.SetRequest("k", b"x" * 100), max_frame_bytes=50)


@pytest.mark.parametrize("header, match", [
    (p.HEADER.pack(p.MAGIC, p.VERSION + 1, p.SetRequest.OP, 0), "version"),
    (p.HEADER.pack(p.MAGIC, p.VERSION, 0x7F, 0), "opcode"),
    (p.HEADER.pack(p.MAGIC, p.VERSION, p.OkResponse.OP, 0), "opcode"),
])
def test_bad_headers_raise(header: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        p.FrameDecoder(requests=True).feed(_after_hello(header))


def _frame(op: int, body: bytes) -> bytes:
    return p.HEADER.pack(p.MAGIC, p.VERSION, op, len(body)) + body


@pytest.mark.parametrize("frame", [
    _frame(p.SetRequest.OP, struct.pack("!I", 5) + b"ab"),                      # short field
    _frame(p.NumKeysRequest.OP, b"extra"),                                      # stray bytes
    _frame(p.DeleteKeyRequest.OP, struct.pack("!I", 2) + b"\xff\xfe"),         # not UTF-8
    _frame(p.GetRequest.OP, struct.pack("!I", 1) + b"k" + struct.pack("!d", float("nan"))),
    _frame(p.GetRequest.OP, struct.pack("!I", 1) + b"k" + struct.pack("!d", -1.0)),
    _frame(p.QueuePopRequest.OP, struct.pack("!I", 1) + b"q\x07" + struct.pack("!d", 1.0)),
    _frame(p.CheckRequest.OP, struct.pack("!I", 10**9)),                        # huge count
], ids=["short", "stray", "utf8", "nan", "negative", "bool", "count"])
def test_malformed_bodies_raise(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        p.FrameDecoder(requests=True).feed(_after_hello(frame))


def test_hello_must_come_first_and_once() -> None:
    with pytest.raises(ProtocolError, match="HELLO"):
        p.FrameDecoder(requests=True).feed(p.encode_request(p.NumKeysRequest()))
    with pytest.raises(ProtocolError, match="HELLO"):
        p.FrameDecoder(requests=True).feed(_after_hello(p.encode_request(p.Hello(p.VERSION, True))))


def test_a_failed_decoder_stays_failed() -> None:
    decoder = p.FrameDecoder(requests=False)
    with pytest.raises(ProtocolError):
        decoder.feed(b"junk")
    with pytest.raises(ProtocolError):
        decoder.feed(p.encode_response(p.OkResponse()))


def test_encoding_a_message_of_the_wrong_direction_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        p.encode_request(p.OkResponse())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.encode_response(p.SetRequest("k", b""))  # type: ignore[arg-type]
