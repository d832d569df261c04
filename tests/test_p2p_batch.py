"""P2POp and batch_isend_irecv: everything is posted before anything waits (a ring of
batches cannot deadlock, whatever the order of the list), checks at the API edge."""

from __future__ import annotations

import numpy as np
import pytest

import accord as dist
from harness import run_ranks


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("recv_first", [True, False])
def test_ring_of_batches(world_size, recv_first):
    def body(rank):
        send = np.arange(2, dtype=np.float32) + 2 * rank
        recv = np.zeros(2, dtype=np.float32)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, recv, (rank - 1) % world_size)]
        works = dist.batch_isend_irecv(ops[::-1] if recv_first else ops)
        assert len(works) == 2
        for work in works:
            work.wait()
        return recv.tolist()

    for rank, got in enumerate(run_ranks(world_size, body)):
        left = (rank - 1) % world_size
        assert got == [2.0 * left, 2.0 * left + 1]


def test_large_exchanges_in_both_directions_and_tags():
    def body(rank):
        other = 1 - rank
        a, b = np.full(200_000, rank, dtype=np.int64), np.full(3, 10 + rank, dtype=np.int64)
        got_a, got_b = np.zeros_like(a), np.zeros_like(b)
        works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, a, other, tag=1), dist.P2POp(dist.isend, b, other, tag=2),
            dist.P2POp(dist.irecv, got_b, other, tag=2), dist.P2POp(dist.irecv, got_a, other, tag=1)])
        for work in works:
            work.wait()
        return int(got_a.sum()), got_b.tolist()

    assert run_ranks(2, body) == [(200_000, [11] * 3), (0, [10] * 3)]


def test_p2pop_in_a_subgroup_with_group_peer():
    def body(rank):
        group = dist.new_group([1, 2])
        if rank == 0:
            return None
        out = np.zeros(1)
        peer = 1 - group.rank()
        works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, out, group=group, group_peer=peer),
                                        dist.P2POp(dist.isend, np.array([float(rank)]), group=group,
                                                   group_peer=peer)])
        for work in works:
            work.wait()
        op = dist.P2POp(dist.isend, out, peer=3 - rank, group=group)
        return out.tolist(), op.peer, op.group_peer

    results = run_ranks(3, body)
    assert results[1] == ([2.0], 2, 1) and results[2] == ([1.0], 1, 0)


def test_batch_argument_checks():
    def body(rank):
        with pytest.raises(ValueError, match="isend or accord.irecv"):
            dist.P2POp(dist.send, np.zeros(1), 1 - rank)
        with pytest.raises(TypeError):
            dist.P2POp(dist.isend, [1, 2], 1 - rank)
        with pytest.raises(ValueError, match="peer is required"):
            dist.P2POp(dist.isend, np.zeros(1))
        with pytest.raises(ValueError, match="P2POp"):
            dist.batch_isend_irecv([np.zeros(1)])
        with pytest.raises(ValueError, match="empty"):
            dist.batch_isend_irecv([])
        pair = dist.new_group([0, 1])
        mixed = [dist.P2POp(dist.isend, np.zeros(1), 1 - rank),
                 dist.P2POp(dist.irecv, np.zeros(1), 1 - rank, group=pair)]
        with pytest.raises(ValueError, match="same group"):
            dist.batch_isend_irecv(mixed)
        with pytest.raises(ValueError, match="itself"):
            dist.batch_isend_irecv([dist.P2POp(dist.isend, np.zeros(1), rank)])
        return True

    assert run_ranks(2, body) == [True, True]
