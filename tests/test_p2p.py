"""Point-to-point: send/recv, tags, ordering, any-source, isend/irecv, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

import accord as dist
from harness import run_ranks


def test_send_recv_returns_the_sender_and_fills_the_buffer():
    def body(rank):
        if rank == 0:
            dist.send(np.arange(5, dtype=np.float32), dst=1)
            return None
        buf = np.zeros(5, dtype=np.float32)
        sender = dist.recv(buf, src=0)
        return sender, buf.tolist()

    assert run_ranks(2, body)[1] == (0, [0.0, 1.0, 2.0, 3.0, 4.0])


def test_same_tag_messages_arrive_in_order():
    def body(rank):
        if rank == 0:
            for i in range(50):
                dist.send(np.array([i]), dst=1, tag=7)
            return None
        got = []
        for _ in range(50):
            buf = np.zeros(1, dtype=np.int64)
            dist.recv(buf, src=0, tag=7)
            got.append(int(buf[0]))
        return got

    assert run_ranks(2, body)[1] == list(range(50))


def test_tags_are_matched_not_order():
    def body(rank):
        if rank == 0:
            dist.send(np.array([1]), dst=1, tag=1)
            dist.send(np.array([2]), dst=1, tag=2)
            return None
        second, first = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        dist.recv(second, src=0, tag=2)
        dist.recv(first, src=0, tag=1)
        return int(first[0]), int(second[0])

    assert run_ranks(2, body)[1] == (1, 2)


def test_any_source_receives_from_everyone_and_names_them():
    def body(rank):
        if rank != 0:
            dist.send(np.array([rank * 10]), dst=0, tag=3)
            return None
        seen = {}
        for _ in range(3):
            buf = np.zeros(1, dtype=np.int64)
            src = dist.recv(buf, tag=3)
            seen[src] = int(buf[0])
        return seen

    assert run_ranks(4, body)[0] == {1: 10, 2: 20, 3: 30}


def test_isend_irecv_ring_with_work_handles():
    def body(rank):
        n = dist.get_world_size()
        out = np.full(1000, rank, dtype=np.int32)
        inc = np.zeros(1000, dtype=np.int32)
        recv_work = dist.irecv(inc, src=(rank - 1) % n, tag=5)
        send_work = dist.isend(out, dst=(rank + 1) % n, tag=5)
        send_work.wait()
        recv_work.wait()
        assert recv_work.is_completed() and recv_work.source_rank() == (rank - 1) % n
        return int(inc[0]), recv_work.result()[0] is inc

    assert run_ranks(5, body) == [((r - 1) % 5, True) for r in range(5)]


def test_zero_element_messages():
    def body(rank):
        if rank == 0:
            dist.send(np.zeros(0), dst=1)
            return None
        return dist.recv(np.zeros(0), src=0)

    assert run_ranks(2, body)[1] == 0


def test_p2p_inside_a_subgroup_uses_group_ranks_with_group_src():
    def body(rank):
        group = dist.new_group([1, 3])
        if rank == 1:
            dist.send(np.array([42]), group_dst=1, group=group)
        elif rank == 3:
            buf = np.zeros(1, dtype=np.int64)
            src = dist.recv(buf, group=group)
            return src, int(buf[0])
        return None

    assert run_ranks(4, body)[3] == (1, 42)  # recv returns the global rank, as torch


@pytest.mark.parametrize("call", ["send", "recv"])
def test_a_rank_cannot_message_itself(call):
    def body(rank):
        with pytest.raises(ValueError, match="itself"):
            getattr(dist, call)(np.zeros(1), rank)
        return True

    assert run_ranks(2, body) == [True, True]


def test_out_of_range_and_conflicting_ranks_are_caller_errors():
    def body(rank):
        with pytest.raises(ValueError, match="out of range"):
            dist.send(np.zeros(1), dst=5)
        with pytest.raises(ValueError, match="not both"):
            dist.send(np.zeros(1), dst=1, group_dst=1)
        with pytest.raises(TypeError):
            dist.send(np.zeros(1), dst="1")
        with pytest.raises(TypeError, match="tag"):
            dist.send(np.zeros(1), dst=1 - rank, tag=1.5)
        return True

    assert run_ranks(2, body) == [True, True]


def test_size_mismatch_is_an_error_on_the_receiver_not_wrong_data():
    def body(rank):
        if rank == 0:
            dist.send(np.arange(5.0), dst=1)
            dist.send(np.arange(3.0), dst=1, tag=1)
            return None
        with pytest.raises(dist.CollectiveMismatchError, match="40-byte.*32 bytes"):
            dist.recv(np.zeros(4), src=0)
        ok = np.zeros(3)
        dist.recv(ok, src=0, tag=1)  # the link is still in sync afterwards
        return ok.tolist()

    assert run_ranks(2, body)[1] == [0.0, 1.0, 2.0]


def test_dtype_mismatch_is_an_error():
    def body(rank):
        if rank == 0:
            dist.send(np.zeros(2, dtype=np.float32), dst=1)
            return None
        with pytest.raises(dist.CollectiveMismatchError, match="float32.*int32"):
            dist.recv(np.zeros(2, dtype=np.int32), src=0)
        return True

    assert run_ranks(2, body)[1] is True


def test_recv_timeout_names_the_sender_and_leaves_the_group_usable():
    def body(rank):
        group = dist.new_group(timeout=0.3)
        if rank == 1:
            with pytest.raises(dist.DistTimeoutError, match="nothing from rank 0"):
                dist.recv(np.zeros(1), src=0, group=group)
        dist.barrier()
        x = np.ones(1)
        dist.all_reduce(x, group=group)
        return float(x[0])

    assert run_ranks(2, body) == [2.0, 2.0]


def test_work_wait_with_a_short_timeout_raises_but_the_receive_goes_on():
    def body(rank):
        if rank == 0:
            buf = np.zeros(1)
            work = dist.irecv(buf, src=1)
            with pytest.raises(dist.DistTimeoutError):
                work.wait(timeout=0.05)
            dist.barrier()
            work.wait()
            return float(buf[0])
        dist.barrier()
        dist.send(np.array([9.0]), dst=0)
        return None

    assert run_ranks(2, body)[0] == 9.0
