"""The sans-IO pieces of the transport: header codec, matching rules, topology arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accord.collectives import patterns
from accord.errors import ProtocolError
from accord.transport.matching import Matcher, Parked, RecvRequest, match_key
from accord.transport.wire import HEADER_SIZE, Fingerprint, FrameKind, Header, unpack_header


@given(kind=st.sampled_from(list(FrameKind)), group=st.integers(0, 2**32 - 1),
       seq=st.integers(0, 2**64 - 1), step=st.integers(0, 2**32 - 1),
       tag=st.integers(-(2**63), 2**63 - 1), op=st.integers(0, 255), algo=st.integers(0, 2**16 - 1),
       dtype=st.integers(0, 255), count=st.integers(0, 2**64 - 1), root=st.integers(-1, 2**31 - 1),
       nbytes=st.integers(0, 2**40))
def test_header_round_trips(kind, group, seq, step, tag, op, algo, dtype, count, root, nbytes):
    header = Header(kind, group, seq, step, tag, Fingerprint(op, algo, dtype, count, root), nbytes)
    packed = header.pack()
    assert len(packed) == HEADER_SIZE
    assert unpack_header(packed) == header


def test_corrupt_headers_are_protocol_errors():
    good = Header(FrameKind.COLL, 1, 2, 3, 0, Fingerprint(), 8).pack()
    with pytest.raises(ProtocolError, match="magic"):
        unpack_header(b"XX" + good[2:])
    with pytest.raises(ProtocolError, match="version"):
        unpack_header(good[:3] + b"\x09" + good[4:])
    with pytest.raises(ProtocolError, match="kind"):
        unpack_header(good[:2] + b"\x63" + good[3:])
    huge = Header(FrameKind.COLL, 1, 2, 3, 0, Fingerprint(), 2**41).pack()
    with pytest.raises(ProtocolError, match="corrupt"):
        unpack_header(huge)


def _recv(matcher: Matcher, src, key) -> RecvRequest:
    return RecvRequest(src, FrameKind.P2P, key, memoryview(bytearray(1)), None, None, "ctx",
                       matcher.next_order())


def _parked(src: int, tag: int) -> Parked:
    return Parked(src, Header(FrameKind.P2P, 0, 0, 0, tag, Fingerprint(), 1), bytearray(1), True)


def test_earliest_arrival_wins_for_any_source_and_fifo_per_source():
    matcher = Matcher()
    for src in (2, 1, 2):
        matcher.park(_parked(src, tag=5))
    key = match_key(FrameKind.P2P, 0, 0, 0, 5)
    assert matcher.take_parked(_recv(matcher, None, key)).src == 2
    assert matcher.take_parked(_recv(matcher, 2, key)).src == 2
    assert matcher.take_parked(_recv(matcher, None, key)).src == 1
    assert matcher.take_parked(_recv(matcher, None, key)) is None


def test_earliest_posted_receive_wins():
    matcher = Matcher()
    key = match_key(FrameKind.P2P, 0, 0, 0, 1)
    first, second = _recv(matcher, None, key), _recv(matcher, 3, key)
    matcher.post(first)
    matcher.post(second)
    assert matcher.take_posted(3, key) is first
    assert matcher.take_posted(3, key) is second
    assert matcher.take_posted(3, key) is None


def test_cancel_withdraws_only_unmatched_receives():
    matcher = Matcher()
    key = match_key(FrameKind.P2P, 0, 0, 0, 1)
    req = _recv(matcher, 1, key)
    matcher.post(req)
    assert matcher.cancel(req) and not matcher.cancel(req)


def test_collective_and_p2p_keys_never_collide():
    assert match_key(FrameKind.COLL, 0, 5, 0, 0) != match_key(FrameKind.P2P, 0, 5, 0, 0)
    assert match_key(FrameKind.P2P, 0, 1, 2, 7) == match_key(FrameKind.P2P, 0, 9, 9, 7)


@pytest.mark.parametrize("count,parts", [(0, 3), (1, 3), (10, 3), (9, 3), (7, 8)])
def test_chunk_bounds_cover_everything_in_order(count, parts):
    bounds = patterns.chunk_bounds(count, parts)
    assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("size", range(1, 18))
def test_binomial_tree_reaches_every_rank_once(size):
    reached = {0}
    for vrank in range(size):
        for child in patterns.binomial_children(vrank, size):
            assert patterns.binomial_parent(child) == vrank and child not in reached
            reached.add(child)
    assert reached == set(range(size))


def test_segments_and_powers():
    assert patterns.segments(0, 0, 4) == [(0, 0)]
    assert patterns.segments(3, 12, 4) == [(3, 7), (7, 11), (11, 12)]
    assert [patterns.largest_power_of_two(n) for n in (1, 2, 3, 7, 8, 9)] == [1, 2, 2, 4, 8, 8]
