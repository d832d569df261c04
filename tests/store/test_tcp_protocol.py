"""torch's TCPStore wire codec: exact bytes, any chunking, limits, and rejection of bad input.

The expected bytes below are what torch 2.13's C++ client sent, captured with a logging proxy
between it and torch's own server (see docs/wire-protocols.md).
"""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.errors import ProtocolError
from accord.store import tcp_protocol as p

C = p.Command
HANDSHAKE = bytes.fromhex("00cef7853c") + bytes.fromhex("0db4680000")  # VALIDATE, PING 26804

# (request as accord encodes it, bytes torch's client sent for the same call)
CAPTURED = [
    (p.request(C.SET, keys=[b"/k"], values=[b"v1"]),
     "0102000000000000002f6b02000000000000007631"),
    (p.request(C.WAIT, keys=[b"/k"]), "06010000000000000002000000000000002f6b"),
    (p.request(C.GET, keys=[b"/k"]), "0302000000000000002f6b"),
    (p.request(C.ADD, keys=[b"/c"], number=-2), "0402000000000000002f63feffffffffffffff"),
    (p.request(C.COMPARE_SET, keys=[b"/cs"], values=[b"", b"new"]),
     "0203000000000000002f6373000000000000000003000000000000006e6577"),
    (p.request(C.CHECK, keys=[b"/k", b"/c"]),
     "05020000000000000002000000000000002f6b02000000000000002f63"),
    (p.request(C.CANCEL_WAIT), "0c"),
    (p.request(C.GETNUMKEYS), "07"),
    (p.request(C.DELETE_KEY, keys=[b"/k"]), "0802000000000000002f6b"),
    (p.request(C.APPEND, keys=[b"/ap"], values=[b"ab"]),
     "0903000000000000002f617002000000000000006162"),
    (p.request(C.MULTI_SET, keys=[b"/m1", b"/m2"], values=[b"1", b"2"]),
     "0b020000000000000003000000000000002f6d3101000000000000003103000000000000002f6d3201000000"
     "0000000032"),
    (p.request(C.MULTI_GET, keys=[b"/m1", b"/m2"]),
     "0a020000000000000003000000000000002f6d3103000000000000002f6d32"),
    (p.request(C.QUEUE_PUSH, keys=[b"/q"], values=[b"x1"]),
     "0e02000000000000002f7102000000000000007831"),
    (p.request(C.QUEUE_POP, keys=[b"/q"]), "0f02000000000000002f71"),
    (p.request(C.QUEUE_LEN, keys=[b"/q"]), "1002000000000000002f71"),
    (p.request(C.LIST_KEYS), "11"),
    (p.request(C.BARRIER, keys=[b"/b"], number=1), "1202000000000000002f620100000000000000"),
]
# (reply as accord's server encodes it, bytes torch's libuv server sent)
CAPTURED_REPLIES = [
    (p.reply_u32(26804), "b4680000"),
    (p.reply_u8(p.STOP_WAITING), "00"),
    (p.reply_u8(p.NOT_READY), "01"),
    (p.string(b"v1"), "02000000000000007631"),
    (p.reply_i64(3), "0300000000000000"),
    (p.reply_strings([b"1", b"2"]), "010000000000000031010000000000000032"),
    (p.reply_popped(b"x1", 1), "010000000000000002000000000000007831"),
    (p.reply_popped(None, 0), "0000000000000000"),
    (p.reply_key_list(["/m2", "/c"]),
     "020000000000000003000000000000002f6d3202000000000000002f63"),
]


@pytest.mark.parametrize("ours, theirs", CAPTURED, ids=lambda v: v if isinstance(v, str) else "")
def test_requests_are_byte_for_byte_torchs(ours: bytes, theirs: str) -> None:
    assert ours.hex() == theirs


@pytest.mark.parametrize("ours, theirs", CAPTURED_REPLIES,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_replies_are_byte_for_byte_torchs(ours: bytes, theirs: str) -> None:
    assert ours.hex() == theirs


def test_every_command_is_covered() -> None:
    covered = {ours[0] for ours, _ in CAPTURED} | {C.VALIDATE, C.PING, C.GETNUMKEYS}
    assert covered == set(C)


def _stream() -> bytes:
    return HANDSHAKE + b"".join(ours for ours, _ in CAPTURED)


def test_the_decoder_reads_back_what_torchs_client_sends() -> None:
    requests = p.RequestDecoder().feed(_stream())
    assert [r.command for r in requests] == [C.VALIDATE, C.PING] + [C(o[0]) for o, _ in CAPTURED]
    assert requests[1].number == 26804
    assert requests[2] == p.Request(C.SET, ("/k",), (b"v1",))
    assert requests[5] == p.Request(C.ADD, ("/c",), (), -2)
    assert requests[12] == p.Request(C.MULTI_SET, ("/m1", "/m2"), (b"1", b"2"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60))
def test_any_chunking_gives_the_same_requests(sizes: list[int]) -> None:
    data, decoder, got, pos = _stream(), p.RequestDecoder(), [], 0
    for size in sizes * (len(data) // sum(sizes) + 1):
        got += decoder.feed(data[pos:pos + size])
        pos += size
        if pos >= len(data):
            break
    assert got == p.RequestDecoder().feed(data)
    assert decoder.buffered == 0


def test_a_large_value_arriving_in_pieces_is_parsed_once() -> None:
    value = bytes(range(256)) * 4096  # 1 MiB
    data = HANDSHAKE + p.request(C.SET, keys=[b"/big"], values=[value])
    decoder = p.RequestDecoder()
    pieces = [decoder.feed(data[i:i + 4096]) for i in range(0, len(data), 4096)]
    assert [len(found) for found in pieces[1:-1]] == [0] * (len(pieces) - 2)
    assert pieces[-1][-1] == p.Request(C.SET, ("/big",), (value,))


def test_keys_that_are_not_utf8_survive() -> None:
    raw = b"/\xff\xfe"
    [_, _, request] = p.RequestDecoder().feed(HANDSHAKE + p.request(C.GET, keys=[raw]))
    assert p.key_bytes(request.keys[0]) == raw


# -- rejection ------------------------------------------------------------------------------------
@pytest.mark.parametrize("data, message", [
    (b"GET / HTTP/1.1\r\n", "did not start with VALIDATE"),
    (b"AS\x01\x01\x00\x00\x00\x09", "accord's own store protocol"),
    (p.request(C.VALIDATE, number=0x12345678), "0x12345678, not torch's 0x3C85F7CE"),
    (HANDSHAKE + b"\x63", "unknown command 99"),
    (HANDSHAKE + HANDSHAKE, "VALIDATE a second time"),
    (HANDSHAKE + b"\x01" + struct.pack("<Q", p.MAX_KEY_BYTES + 1), "key of 8193 bytes"),
    (HANDSHAKE + b"\x01" + p.string(b"/k") + struct.pack("<Q", p.MAX_VALUE_BYTES + 1),
     "value of 8388609 bytes"),
    (HANDSHAKE + b"\x06" + struct.pack("<Q", 1 << 40), "1099511627776 keys"),
    (HANDSHAKE + b"\x0b" + struct.pack("<q", -1), "-1 keys"),
], ids=["http", "old-accord", "magic", "unknown", "validate-twice", "key", "value", "count",
        "negative-count"])
def test_bad_input_is_a_protocol_error_naming_the_cause(data: bytes, message: str) -> None:
    decoder = p.RequestDecoder()
    before = decoder.feed(data)  # the requests before the violation still count
    assert [r.command for r in before] == [C.VALIDATE, C.PING][:len(before)]
    assert isinstance(decoder.failed, ProtocolError)
    assert re.search(message, str(decoder.failed))
    with pytest.raises(ProtocolError, match=message):  # and the decoder stays failed
        decoder.feed(HANDSHAKE)


def test_limits_at_the_edge_are_accepted() -> None:
    key, value = b"/" + b"k" * (p.MAX_KEY_BYTES - 1), b"v" * p.MAX_VALUE_BYTES
    p.check_limits([key], [value], "set")
    data = HANDSHAKE + p.request(C.SET, keys=[key], values=[value])
    assert p.RequestDecoder().feed(data)[-1].values == (value,)


@pytest.mark.parametrize("keys, values, message", [
    ([b"k" * (p.MAX_KEY_BYTES + 1)], [], "key of 8193 bytes.*limit of 8192"),
    ([b"k"], [b"v" * (p.MAX_VALUE_BYTES + 1)], "value of 8388609 bytes.*8 MiB"),
    ([b"k"] * (p.MAX_KEY_COUNT + 1), [], "131073 keys in one call"),
])
def test_a_client_checks_the_limits_before_sending(keys: list[bytes], values: list[bytes],
                                                   message: str) -> None:
    with pytest.raises(ValueError, match=message):
        p.check_limits(keys, values, "set('k')")


def test_reading_replies() -> None:
    data = bytearray(p.reply_i64(-5) + p.string(b"abc") + p.reply_u8(1) + p.reply_u32(9))

    def read(n: int) -> bytes:
        chunk = bytes(data[:n])
        del data[:n]
        return chunk

    assert (p.read_i64(read), p.read_string(read), p.read_u8(read), p.read_u32(read)) == \
        (-5, b"abc", 1, 9)
    with pytest.raises(ProtocolError, match="corrupt"):
        p.read_string(lambda n: b"\xff" * n)
