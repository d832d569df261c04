"""``ShmDomain.quick_wait``: a short wait with no clock and no deadline, before ``wait_slow``
(transport/shm.py). A small call's usual wait is this short; the deadline and the call's
description (about 1 µs) must be made only when it is not."""

from __future__ import annotations

import time
import uuid

import pytest

from accord.transport import shm as shm_module
from accord.transport.shm import Segment, ShmDomain, segment_size
from accord.transport.shm_words import READY


def make_domain(local_ranks=2, threaded=False):
    """Rank 0's view of a two-rank domain, both segments made (and unlinked) here."""
    size = segment_size(4096)
    segments = [Segment(f"accord-test-{uuid.uuid4().hex[:12]}-{i}", size, create=True) for i in (0, 1)]
    for s in segments:
        s.unlink()
    return ShmDomain(
        0, segments, 4096, local_ranks=local_ranks, check=lambda what, lagging: None,
        threaded=threaded, spread=False,
    )


@pytest.fixture(params=["spins", "yields"])
def domain(request, monkeypatch):
    d = make_domain(threaded=request.param == "yields")
    assert bool(d._spin) == (request.param == "spins")
    # no clock on this path: a read of one (through this module's ``time``) fails the test
    monkeypatch.setattr(shm_module, "time", _NoClock())
    return d


class _NoClock:
    """``time`` for the shm module while a test asserts that no clock is read."""

    sleep = staticmethod(time.sleep)

    @staticmethod
    def monotonic() -> float:
        pytest.fail("quick_wait read the clock")


def test_a_peer_already_there_is_found(domain):
    domain.words[1][READY] = 5
    assert domain.quick_wait(READY, 5, [1])
    assert domain.quick_wait(READY, 4, [1])


def test_a_peer_not_there_is_left_to_the_slow_wait(domain):
    domain.words[1][READY] = 4
    assert not domain.quick_wait(READY, 5, [1])


def test_the_slow_wait_still_ends_and_times_out():
    from accord.errors import DistTimeoutError
    from accord.timeouts import Deadline

    d = make_domain()
    d.words[1][READY] = 3
    d.wait_slow(READY, 3, [1], Deadline.after(5.0), "call")  # reached: returns at once
    start = time.monotonic()
    with pytest.raises(DistTimeoutError, match="nothing from rank 1"):
        d.wait_slow(READY, 4, [1], Deadline.after(0.05), "call")
    assert time.monotonic() - start < 2.0
