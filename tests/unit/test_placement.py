"""Ranks that share a CPU while another idles: a stalled waiter moves (transport/placement.py
and ``ShmDomain._spread``), without leaving itself pinned."""

from __future__ import annotations

import os
import uuid

import pytest

from accord.transport import placement
from accord.transport.shm import CPU, ShmDomain, Segment, segment_size

pytestmark = pytest.mark.skipif(
    not placement.available() or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux's sched_getcpu and at least two CPUs this process may use")


@pytest.fixture
def mask():
    """Run on the lowest CPU this process may use, and give the full mask back after."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    os.sched_setaffinity(0, allowed)
    yield allowed
    os.sched_setaffinity(0, allowed)


def make_domain(spread=True):
    """Rank 0's view of a two-rank domain, both segments made (and unlinked) here."""
    size = segment_size(4096)
    segments = [Segment(f"accord-test-{uuid.uuid4().hex[:12]}-{i}", size, create=True) for i in (0, 1)]
    for s in segments:
        s.unlink()
    return ShmDomain(0, segments, 4096, local_ranks=2, check=lambda what, lagging: None, spread=spread)


@pytest.fixture
def domain():
    d = make_domain()
    d.round = 10
    yield d


def post(domain, rank, round_, cpu):
    domain.words[rank][CPU] = (round_ << 16) | (cpu + 1)


def test_move_off_goes_elsewhere_and_keeps_the_mask(mask):
    here = placement.current_cpu()
    moved = placement.move_off(here, [], salt=0)
    assert moved is not None and moved != here and moved in mask
    assert placement.current_cpu() == moved
    assert os.sched_getaffinity(0) == mask  # not left pinned


def test_move_off_stays_where_every_cpu_is_taken(mask):
    here = placement.current_cpu()
    assert placement.move_off(here, list(mask), salt=0) is None
    assert placement.current_cpu() == here and os.sched_getaffinity(0) == mask


def test_move_off_stays_when_the_mask_has_one_cpu(mask):
    here = placement.current_cpu()
    os.sched_setaffinity(0, {here})
    assert placement.move_off(here, [], salt=0) is None
    assert os.sched_getaffinity(0) == {here}


def test_a_waiter_on_its_peers_cpu_moves(mask, domain):
    assert domain._placing
    here = placement.current_cpu()
    post(domain, 1, domain.round, here)
    domain._spread(here, [1])
    assert domain.moves == 1
    now = placement.current_cpu()
    assert now != here and os.sched_getaffinity(0) == mask
    assert domain.words[0][CPU] == (domain.round << 16) | (now + 1)  # posts where it went


def test_a_stale_post_or_another_cpu_does_not_move_it(mask, domain):
    here = placement.current_cpu()
    post(domain, 1, domain.round - 2, here)  # two rounds old: the peer may have moved since
    domain._spread(here, [1])
    other = min(c for c in mask if c != here)
    post(domain, 1, domain.round, other)  # fresh, and on another CPU
    domain._spread(here, [1])
    assert domain.moves == 0 and placement.current_cpu() == here


def test_spreading_can_be_turned_off(monkeypatch, mask):
    from accord.config import Tunables

    monkeypatch.setenv("ACCORD_SPREAD", "0")
    assert not Tunables.from_env().spread
    assert not make_domain(spread=False)._placing
    monkeypatch.delenv("ACCORD_SPREAD")
    assert Tunables.from_env().spread
