"""The shared-memory algorithms of reduce, gather, scatter, all_gather, reduce_scatter and
all_to_all, driven through the group's generic ``launch`` (ranks are threads sharing slots of
4 KiB, so large cases take many rounds)."""

from __future__ import annotations

import numpy as np
import pytest

import accord as dist
from accord.arrays import as_buffer
from accord.group.dispatch import launch
from accord.reduce_ops import ReduceOp, make_kernel
from accord.transport.loopback import LoopbackFabric
from harness import run_ranks

WORLD_SIZES = [2, 3, 5]
COUNTS = [0, 1, 7, 1500]  # 1500 int64 = 12 KB: three slots' worth


@pytest.fixture(autouse=True)
def small_slots(monkeypatch):
    monkeypatch.setenv("ACCORD_SHM_SLOT_BYTES", "4096")


def shm_run(world_size, body, shared=True):
    return run_ranks(world_size, body, fabric=LoopbackFabric(world_size, shared_memory=shared))


def run(collective, fp_array, *args, root=-1):
    group = dist.group.WORLD
    assert group.engine.shared
    fp = as_buffer(fp_array, writable=False) if fp_array is not None else None
    launch(group, collective, fp.nbytes if fp else 0, fp, args, [], [], False, root=root)


def kernel(op, dtype):
    return make_kernel(ReduceOp(op), np.dtype(dtype), np.dtype(dtype).name)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_reduce_to_every_root(world_size, count):
    def body(rank):
        results = []
        for root in range(world_size):
            data = np.arange(count, dtype=np.int64) + rank
            before = data.copy()
            run("reduce", data, data, kernel(ReduceOp.SUM, np.int64), root, root=root)
            results.append(data if rank == root else (data == before).all())
        return results

    for rank, results in enumerate(shm_run(world_size, body)):
        for root, result in enumerate(results):
            if rank == root:
                np.testing.assert_array_equal(result, np.arange(count) * world_size + sum(range(world_size)))
            else:
                assert result  # non-roots keep their input


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_gather_and_scatter(world_size, count):
    def body(rank):
        root = world_size - 1
        inp = np.arange(count, dtype=np.int64) + 100 * rank
        outs = [np.full(count, -1, dtype=np.int64) for _ in range(world_size)] if rank == root else None
        run("gather", inp, inp, outs, root, root=root)
        out = np.full(count, -1, dtype=np.int64)
        ins = [np.arange(count, dtype=np.int64) * (r + 1) for r in range(world_size)] if rank == 0 else None
        run("scatter", out, out, ins, 0, root=0)
        return outs, out

    for rank, (outs, out) in enumerate(shm_run(world_size, body)):
        np.testing.assert_array_equal(out, np.arange(count) * (rank + 1))
        if outs is not None:
            for r, o in enumerate(outs):
                np.testing.assert_array_equal(o, np.arange(count) + 100 * r)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_all_gather_uneven(world_size, count):
    sizes = [count + 3 * r for r in range(world_size)]

    def body(rank):
        inp = np.full(sizes[rank], rank, dtype=np.float32)
        outs = [np.zeros(s, dtype=np.float32) for s in sizes]
        run("all_gather", None, inp, outs)
        return outs

    for outs in shm_run(world_size, body):
        for r, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.full(sizes[r], r, dtype=np.float32))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG])
def test_reduce_scatter_uneven(world_size, count, op):
    sizes = [count + r for r in range(world_size)]

    def body(rank):
        ins = [np.arange(s, dtype=np.float64) + rank for s in sizes]
        out = np.zeros(sizes[rank], dtype=np.float64)
        run("reduce_scatter", None, out, ins, kernel(op, np.float64))
        return out

    for rank, out in enumerate(shm_run(world_size, body)):
        base = np.arange(sizes[rank], dtype=np.float64)
        expected = {ReduceOp.SUM: base * world_size + sum(range(world_size)),
                    ReduceOp.MAX: base + world_size - 1,
                    ReduceOp.AVG: (base * world_size + sum(range(world_size))) / world_size}[op]
        np.testing.assert_allclose(out, expected)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_all_to_all_uneven(world_size, count):
    def size(src, dst):
        return count + src + 2 * dst

    def body(rank):
        ins = [np.full(size(rank, j), rank * 10 + j, dtype=np.int32) for j in range(world_size)]
        outs = [np.zeros(size(r, rank), dtype=np.int32) for r in range(world_size)]
        run("all_to_all", None, outs, ins)
        return outs

    for rank, outs in enumerate(shm_run(world_size, body)):
        for r, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.full(size(r, rank), r * 10 + rank))


@pytest.mark.parametrize("count", [3, 20000])  # 20000: read straight from the peers' inputs
def test_all_to_all_size_disagreement_is_a_mismatch(count):
    def body(rank):
        ins = [np.zeros(count, dtype=np.int32) for _ in range(2)]
        outs = [np.zeros(count + (rank != 0), dtype=np.int32) for _ in range(2)]
        with pytest.raises(dist.CollectiveMismatchError, match=f"sends {count} elements"):
            run("all_to_all", None, outs, ins)
        return True

    assert run_ranks(2, body, fabric=LoopbackFabric(2, shared_memory=True), expect_failure=True)[1] is True


# -- single-copy algorithms (CMA: reading a peer's memory; ranks as threads read their own
# process, which the kernel always allows) --------------------------------------------------

def cma_run(monkeypatch, world_size, body, collective, name="cma"):
    monkeypatch.setenv("ACCORD_ALGORITHM", f"{collective}={name}")
    return shm_run(world_size, body)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_cma_all_reduce_and_broadcast(monkeypatch, world_size, count):
    def body(rank):
        assert dist.group.WORLD.engine.cma
        data = np.arange(count, dtype=np.float64) + rank
        dist.all_reduce(data)
        root = world_size - 1
        block = np.full(count, rank, dtype=np.int32)
        dist.broadcast(block, src=root)
        return data, block

    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=cma_two_shot,broadcast=cma")
    for data, block in shm_run(world_size, body):
        np.testing.assert_array_equal(data, np.arange(count) * world_size + sum(range(world_size)))
        assert (block == world_size - 1).all()


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("op, dtype", [("SUM", "float64"), ("AVG", "float32"), ("MAX", "int32"), ("PRODUCT", "int64")])
def test_cma_all_reduce_in_pieces(monkeypatch, world_size, op, dtype):
    """cma_two_shot folds each rank's slice in 512 KiB pieces and writes each reduced piece
    into every peer's buffer: slices of several pieces and a ragged last one, every op's
    finalize, the same bits on every rank."""
    count = 3 * (512 << 10) // np.dtype(dtype).itemsize * world_size // 2 + 5
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=cma_two_shot")

    def value(rank):
        return (np.arange(count) % 7 + rank + 1).astype(dtype)

    def body(rank):
        data = value(rank)
        dist.all_reduce(data, op=getattr(dist.ReduceOp, op))
        return data

    inputs = np.stack([value(r) for r in range(world_size)])
    expected = {"SUM": inputs.sum(0), "AVG": inputs.astype(np.float64).mean(0), "MAX": inputs.max(0),
                "PRODUCT": inputs.prod(0)}[op].astype(dtype)
    results = shm_run(world_size, body)
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        assert got.tobytes() == results[0].tobytes()


def test_a_failed_cma_call_takes_its_buffer_back():
    """cma_two_shot writes into the peers' buffers: a rank whose call failed takes its buffer
    back and gives the others time to be out of the round (``quiesce``) before its caller has
    the buffer again; a write after that fails, naming the rank, instead of landing in it. It
    does not say done (a peer waiting for its done must not take the failed call for a
    finished one)."""
    import threading
    import time

    from accord.errors import PeerError
    from accord.transport.shm_words import DONE

    sync = threading.Barrier(2)

    def body(rank):
        domain = dist.group.WORLD.engine.call_slots.domain
        assert domain.cma is not None
        k = domain.round + 10  # a round neither rank uses
        if rank == 1:
            buf = np.zeros(4)
            domain.expose(k, buf)
            sync.wait()  # exposed
            sync.wait()  # rank 0 wrote into it
            written = buf.tolist()
            start = time.monotonic()
            domain.quiesce(k, 5.0)  # returns once rank 0 says done (0.2 s later)
            waited = time.monotonic() - start
            done = int(domain.mine[DONE])
            sync.wait()
            sync.wait()  # rank 0 tried again
            return written, waited, buf.tolist(), done < k
        domain.expose(k, np.zeros(4))  # in the round too: rank 1 waits for it to be done
        sync.wait()
        domain.put(1, k, 0, np.full(4, 7.0))
        sync.wait()
        time.sleep(0.2)
        domain.mine[DONE] = k
        sync.wait()  # rank 1 took its buffer back
        with pytest.raises(PeerError, match="rank 1 took its buffer back"):
            domain.put(1, k, 0, np.ones(4))
        sync.wait()
        return None

    written, waited, after, not_done = shm_run(2, body)[1]
    assert written == [7.0] * 4 and after == [7.0] * 4
    assert 0.1 < waited < 3.0 and not_done


def test_a_process_that_is_gone_or_a_zombie_writes_nothing():
    import os
    import subprocess
    import time

    from accord.transport.shm_exposed import _alive

    assert _alive(os.getpid())
    reaped = subprocess.Popen(["true"])
    reaped.wait()
    assert not _alive(reaped.pid)
    zombie = subprocess.Popen(["true"])
    give_up = time.monotonic() + 10
    while _alive(zombie.pid) and time.monotonic() < give_up:  # exited, not yet reaped
        time.sleep(0.01)
    assert not _alive(zombie.pid) and os.path.exists(f"/proc/{zombie.pid}")
    zombie.wait()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
def test_cma_gathers_and_scatters(monkeypatch, world_size, count):
    sizes = [count + 2 * r for r in range(world_size)]
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_gather=cma,scatter=cma,reduce=cma")

    def body(rank):
        inp = np.full(sizes[rank], rank, dtype=np.float32)
        outs = [np.zeros(s, dtype=np.float32) for s in sizes]
        run("all_gather", None, inp, outs)
        g_in = np.arange(count, dtype=np.int64) + 10 * rank
        g_out = [np.zeros(count, dtype=np.int64) for _ in range(world_size)] if rank == 0 else None
        run("gather", g_in, g_in, g_out, 0, root=0)
        s_out = np.zeros(count, dtype=np.int64)
        s_in = [np.full(count, r, dtype=np.int64) for r in range(world_size)] if rank == 1 else None
        run("scatter", s_out, s_out, s_in, 1, root=1)
        red = np.arange(count, dtype=np.int64) + rank
        run("reduce", red, red, kernel(ReduceOp.SUM, np.int64), 0, root=0)
        return outs, g_out, s_out, red

    for rank, (outs, g_out, s_out, red) in enumerate(shm_run(world_size, body)):
        for r, o in enumerate(outs):
            assert (o == r).all() and o.size == sizes[r]
        if g_out is not None:
            for r, o in enumerate(g_out):
                np.testing.assert_array_equal(o, np.arange(count) + 10 * r)
        assert (s_out == rank).all()
        expected = np.arange(count) * world_size + sum(range(world_size)) if rank == 0 else np.arange(count) + rank
        np.testing.assert_array_equal(red, expected)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("contiguous", [True, False])
def test_cma_reduce_scatter_and_all_to_all(monkeypatch, world_size, count, contiguous):
    monkeypatch.setenv("ACCORD_ALGORITHM", "reduce_scatter=cma,all_to_all=cma")

    def blocks(sizes, fill):
        if contiguous:  # chunks of one flat buffer, as reduce_scatter_tensor passes them
            flat = np.concatenate([np.full(s, v, dtype=np.float64) for s, v in zip(sizes, fill)])
            starts = np.cumsum([0] + sizes)
            return [flat[a:b] for a, b in zip(starts[:-1], starts[1:])]
        return [np.full(s, v, dtype=np.float64) for s, v in zip(sizes, fill)]

    def body(rank):
        sizes = [count + r for r in range(world_size)]
        ins = blocks(sizes, [rank + j for j in range(world_size)])
        out = np.zeros(sizes[rank])
        run("reduce_scatter", None, out, ins, kernel(ReduceOp.SUM, np.float64))
        send = [count + rank + 2 * j for j in range(world_size)]
        a_ins = blocks(send, [rank * 10 + j for j in range(world_size)])
        a_outs = [np.zeros(count + r + 2 * rank) for r in range(world_size)]
        run("all_to_all", None, a_outs, a_ins)
        return out, a_outs

    for rank, (out, a_outs) in enumerate(shm_run(world_size, body)):
        assert (out == sum(r + rank for r in range(world_size))).all()
        for r, o in enumerate(a_outs):
            assert (o == r * 10 + rank).all() and o.size == count + r + 2 * rank


@pytest.mark.parametrize("world_size", [2, 3])
def test_cma_reduce_scatter_in_pieces(monkeypatch, world_size):
    """Blocks of several 512 KiB pieces, uneven, with values that differ along each block:
    a piece read from the wrong offset would show."""
    monkeypatch.setenv("ACCORD_ALGORITHM", "reduce_scatter=cma")
    piece = 512 << 10 >> 3  # float64 elements per piece
    sizes = [2 * piece + 3 + 5000 * r for r in range(world_size)]

    def body(rank):
        ins = [np.arange(s, dtype=np.float64) * (rank + 1) + j for j, s in enumerate(sizes)]
        out = np.zeros(sizes[rank])
        run("reduce_scatter", None, out, ins, kernel(ReduceOp.SUM, np.float64))
        return out

    total = sum(range(1, world_size + 1))
    for rank, out in enumerate(shm_run(world_size, body)):
        np.testing.assert_array_equal(out, np.arange(sizes[rank]) * total + world_size * rank)


def test_cma_reduce_scatter_block_sizes_that_disagree_raise_a_mismatch(monkeypatch):
    monkeypatch.setenv("ACCORD_ALGORITHM", "reduce_scatter=cma")
    big = (512 << 10 >> 3) * 2 + 1

    def body(rank):
        sizes = [big, big + (1 if rank == 0 else 0)]  # rank 0 says rank 1's block is longer
        ins = [np.ones(s) for s in sizes]
        out = np.zeros(sizes[rank])
        try:
            run("reduce_scatter", None, out, ins, kernel(ReduceOp.SUM, np.float64))
        except dist.CollectiveMismatchError as exc:
            return str(exc)
        except dist.DistError as exc:  # the other rank: the group broke under it
            return type(exc).__name__
        return "no error"

    results = run_ranks(2, body, fabric=LoopbackFabric(2, shared_memory=True), expect_failure=True)
    assert any("bytes for this rank" in str(r) for r in results), results


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("cma", [True, False], ids=["direct", "slots"])
def test_large_uneven_all_to_all_after_the_size_round(monkeypatch, world_size, cma):
    """Blocks beyond the first round (slots of 4 KiB here), uneven, values that differ along
    each block. With reads allowed the blocks are read straight from the peers' inputs once
    the sizes are known (the list form's size is not known up front); without, they go
    through the slots. Also a rank whose own blocks are small beside a peer's large ones."""
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_to_all=shm")
    if not cma:
        monkeypatch.setenv("ACCORD_CMA", "0")

    def count(src, dst):
        return 9000 + 1000 * src + 7 * dst if src != 1 else 3 + dst  # rank 1 sends little

    def body(rank):
        assert dist.group.WORLD.engine.cma == cma
        ins = [np.arange(count(rank, j), dtype=np.float64) + 1000 * rank + j for j in range(world_size)]
        outs = [np.zeros(count(r, rank)) for r in range(world_size)]
        run("all_to_all", None, outs, ins)
        return outs

    for rank, outs in enumerate(shm_run(world_size, body)):
        for r, out in enumerate(outs):
            np.testing.assert_array_equal(out, np.arange(count(r, rank)) + 1000 * r + rank)


def _strided(values):
    """A writeable non-contiguous view holding ``values``: it takes the long path."""
    values = np.asarray(values)
    base = np.zeros(2 * values.size, dtype=values.dtype)
    view = base[::2]
    view[...] = values.reshape(-1)
    return view


@pytest.mark.parametrize("shared", [True, False], ids=["shm", "messages"])
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("count", [1, 700])
def test_short_and_long_paths_agree_with_each_other(world_size, count, shared):
    """Rank 0 passes plain contiguous arrays (the planned short path); the others pass strided
    views (the long path, as_buffer copies). Both paths must pick the same algorithm and
    fingerprint (else a mismatch is raised) and give the same results, call after call; over
    shared memory and over messages (what TCP runs)."""
    def body(rank):
        n, long_path = world_size, rank != 0
        make = _strided if long_path else np.asarray
        results = []
        for repeat in range(3):  # the plan is made on the first call and reused
            x = np.arange(count, dtype=np.int64) + 100 * rank + repeat
            outs = [make(np.zeros(count, dtype=np.int64)) for _ in range(n)]
            dist.all_gather(outs, make(x))
            results.append([np.asarray(o).tolist() for o in outs])
            flat = np.zeros(n * count, dtype=np.int64)
            dist.all_gather_into_tensor(flat if not long_path else _strided(flat), make(x))
            out = make(np.zeros(count, dtype=np.int64))
            dist.reduce_scatter(out, [make(x + j) for j in range(n)])
            results.append(np.asarray(out).tolist())
            src = np.arange(n * count, dtype=np.int64) + rank
            out = make(np.zeros(count, dtype=np.int64))
            dist.reduce_scatter_tensor(out, make(src))
            results.append(np.asarray(out).tolist())
            got = [make(np.zeros(count, dtype=np.int64)) for _ in range(n)]
            dist.all_to_all(got, [make(x + 10 * j) for j in range(n)])
            results.append([np.asarray(g).tolist() for g in got])
            single = make(np.zeros(n * count, dtype=np.int64))
            dist.all_to_all_single(single, make(src))
            results.append(np.asarray(single).tolist())
        return results

    got = shm_run(world_size, body, shared)
    n = world_size
    for rank, results in enumerate(got):
        for repeat in range(3):
            ag, rs, rst, a2a, single = results[5 * repeat:5 * repeat + 5]
            assert ag == [(np.arange(count) + 100 * r + repeat).tolist() for r in range(n)]
            assert rs == sum(np.arange(count) + 100 * r + repeat + rank for r in range(n)).tolist()
            assert rst == sum(np.arange(n * count)[rank * count:(rank + 1) * count] + r
                              for r in range(n)).tolist()
            assert a2a == [(np.arange(count) + 100 * r + repeat + 10 * rank).tolist() for r in range(n)]
            assert single == np.concatenate([
                (np.arange(n * count) + r)[rank * count:(rank + 1) * count] for r in range(n)]).tolist()


@pytest.mark.parametrize("shared", [True, False], ids=["shm", "messages"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_all_to_all_single_with_split_sizes_on_both_paths_agrees(world_size, shared):
    """all_to_all_single with split sizes (uneven, and even ones given explicitly): rank 0
    on the short path (its plan keyed by the splits, reused call after call), the others on
    the long path (strided views); the middle call async everywhere (queued, then run as
    the blocking call). The paths must agree on the fingerprint and give the same pieces."""
    def body(rank):
        n = world_size
        make = _strided if rank != 0 else np.asarray
        in_splits = [j + rank + 1 for j in range(n)]  # rank r sends j + r + 1 rows to rank j
        out_splits = [rank + r + 1 for r in range(n)]
        results = []
        for repeat in range(3):
            src = np.arange(sum(in_splits), dtype=np.int64) + 1000 * rank + repeat
            out = make(np.zeros(sum(out_splits), dtype=np.int64))
            work = dist.all_to_all_single(out, make(src), out_splits, in_splits, async_op=repeat == 1)
            if work is not None:
                work.wait()
            results.append(np.asarray(out).tolist())
            even = make(np.zeros(2 * n, dtype=np.int64))
            dist.all_to_all_single(even, make(np.arange(2 * n, dtype=np.int64) + 10 * rank), [2] * n, [2] * n)
            results.append(np.asarray(even).tolist())
        return results

    got = shm_run(world_size, body, shared)
    n = world_size
    for rank, results in enumerate(got):
        for repeat in range(3):
            uneven, even = results[2 * repeat:2 * repeat + 2]
            pieces = []
            for r in range(n):
                sent = [j + r + 1 for j in range(n)]
                start = sum(sent[:rank])
                pieces += (np.arange(sum(sent)) + 1000 * r + repeat)[start:start + sent[rank]].tolist()
            assert uneven == pieces
            assert even == [10 * r + 2 * rank + k for r in range(n) for k in range(2)]


@pytest.mark.parametrize("shared", [True, False], ids=["shm", "messages"])
@pytest.mark.parametrize("root", [0, 1])
def test_rooted_short_and_long_paths_agree(root, shared):
    """gather, scatter and reduce with rank 0 on the short path (plain arrays) and the others
    on the long one (strided views), the root on either."""
    n, count = 3, 5

    def body(rank):
        make = _strided if rank != 0 else np.asarray
        results = []
        for repeat in range(3):
            x = np.arange(count, dtype=np.int64) + 10 * rank + repeat
            outs = [make(np.zeros(count, dtype=np.int64)) for _ in range(n)] if rank == root else None
            dist.gather(make(x), outs, dst=root)
            results.append([np.asarray(o).tolist() for o in outs] if outs is not None else None)
            got = make(np.zeros(count, dtype=np.int64))
            ins = [make(np.full(count, 100 * j + repeat, dtype=np.int64)) for j in range(n)] \
                if rank == root else None
            dist.scatter(got, ins, src=root)
            results.append(np.asarray(got).tolist())
            y = make(x.copy())
            dist.reduce(y, dst=root)
            results.append(np.asarray(y).tolist())
        return results

    for rank, results in enumerate(shm_run(n, body, shared)):
        for repeat in range(3):
            gathered, scattered, reduced = results[3 * repeat:3 * repeat + 3]
            rows = [(np.arange(count) + 10 * r + repeat).tolist() for r in range(n)]
            assert gathered == (rows if rank == root else None)
            assert scattered == [100 * rank + repeat] * count
            assert reduced == (np.sum(rows, axis=0).tolist() if rank == root else rows[rank])


@pytest.mark.parametrize("count", [2, 1500])  # one round; several rounds
def test_all_to_all_sizes_that_disagree_raise_a_mismatch(count):
    """Rank 0 sends rank 1 one element more than rank 1's output for it holds: rank 1 raises
    CollectiveMismatchError naming rank 0 (never a short or long copy); rank 0, whose own
    sizes agree, finishes or learns of the failure."""
    def body(rank):
        sends = [count, count + 1] if rank == 0 else [count, count]
        ins = [np.full(s, rank, dtype=np.int64) for s in sends]
        outs = [np.zeros(count, dtype=np.int64) for _ in range(2)]
        try:
            dist.all_to_all(outs, ins)
        except dist.CollectiveMismatchError as exc:
            return str(exc)
        except dist.PeerError:
            return "peer"
        return "ok"

    got = shm_run(2, body)
    assert "rank 0 sends" in got[1] and "holds" in got[1], got
    assert got[0] in ("ok", "peer") or "rank" in got[0], got


@pytest.mark.parametrize("world_size", [2, 3])
def test_message_groups_plan_their_blocking_calls(world_size):
    """Over messages (TCP's algorithms), a blocking call on plain arrays is planned once per
    signature and then run from the plan: all_reduce, broadcast and barrier give the same
    results as on the long path (rank 1 passes strided views), and a rank whose size then
    differs still raises a mismatch (the plan keeps the fingerprint)."""
    from accord.collectives import registry
    from accord.world import current_world

    def body(rank):
        make = _strided if rank == 1 else np.asarray
        got = []
        for repeat in range(3):
            x = make(np.arange(4, dtype=np.float64) + rank + repeat)
            dist.all_reduce(x)
            y = make(np.full(3, rank + repeat, dtype=np.int32))
            dist.broadcast(y, src=world_size - 1)
            dist.barrier()
            got.append((np.asarray(x).tolist(), np.asarray(y).tolist()))
        plans = current_world().default_group.plans
        kinds = {key[0]: plan[1].kind for key, plan in plans.items() if plan is not None}
        z = np.zeros(5 if rank == 0 else 6)
        try:
            dist.all_reduce(z)
            error = None
        except dist.DistError as exc:
            error = type(exc).__name__
        return got, kinds, error

    for rank, (got, kinds, error) in enumerate(shm_run(world_size, body, shared=False)):
        for repeat, (x, y) in enumerate(got):
            assert x == (sum(np.arange(4) + r + repeat for r in range(world_size))).tolist()
            assert y == [world_size - 1 + repeat] * 3
        if rank != 1:  # rank 1 took the long path for its views
            assert kinds == {"all_reduce": registry.MESSAGES, "broadcast": registry.MESSAGES,
                             "barrier": registry.MESSAGES}, kinds
        assert error in ("CollectiveMismatchError", "PeerError"), error


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.complex128])
@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_even_all_to_all_in_one_round(world_size, dtype):
    """The one-round even all_to_all (the header of sizes, then a block per rank, in cached
    views), with dtypes whose size does and does not divide the header (complex128 at an odd
    world takes the general path), in the list and the tensor form."""
    n = world_size

    def body(rank):
        out = []
        for m, listed in ((1, True), (3, True), (1, False), (3, False)):
            src = (np.arange(n * m) + 100 * rank).astype(dtype)
            if listed:
                got = [np.zeros(m, dtype=dtype) for _ in range(n)]
                dist.all_to_all(got, [src[j * m:(j + 1) * m].copy() for j in range(n)])
                out.append(np.concatenate(got).tolist())
            else:
                got = np.zeros(n * m, dtype=dtype)
                dist.all_to_all_single(got, src)
                out.append(got.tolist())
        return out

    for rank, out in enumerate(shm_run(n, body)):
        for m, got in zip((1, 3, 1, 3), out):
            want = np.concatenate([(np.arange(n * m) + 100 * r).astype(dtype)[rank * m:(rank + 1) * m]
                                   for r in range(n)])
            assert got == want.tolist()


@pytest.mark.parametrize("op", ["broadcast", "scatter"])
@pytest.mark.parametrize("compiled", [True, False])
def test_a_root_that_only_writes_does_not_wait_for_the_others(op, compiled):
    """broadcast's and scatter's root leaves its round once its slot is written (as MPI's
    eager root does); its next call first checks that every rank reached that round with
    the same call. A receiver 0.4 s late still gets the data, and the root's next
    collective waits for it there. The compiled one-round form and the long path alike."""
    import time

    def body(rank):
        data = np.arange(4.0) + 10 if rank == 0 else np.zeros(4)
        if not compiled:
            data = data[::2]  # a strided view: not the short path, the long one
        ins = [np.full(data.shape, 7.0 * r) for r in range(3)] if rank == 0 else None
        if rank == 1:
            time.sleep(0.4)
        start = time.monotonic()
        if op == "broadcast":
            dist.broadcast(data, src=0)
        else:
            dist.scatter(data, ins, src=0)
        took = time.monotonic() - start
        dist.barrier()  # (the root's left round is checked here)
        dist.all_reduce(data)
        return took, data.tolist()

    results = shm_run(3, body)
    assert results[0][0] < 0.2, results  # the root did not wait for rank 1, 0.4 s late
    if op == "broadcast":
        expected = [3 * v for v in ([10.0, 11.0, 12.0, 13.0] if compiled else [10.0, 12.0])]
    else:
        expected = [7.0 * (0 + 1 + 2)] * (4 if compiled else 2)
    assert all(got == expected for _, got in results), results


def _ones(compiled):
    """Four ones: a plain array (the compiled one-round form) or a strided view of one (the
    long path)."""
    data = np.ones(8)
    return data[:4] if compiled else data[::2]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_left_round_that_nobody_else_made_fails_the_roots_next_call(compiled):
    """Rank 0 broadcasts as root; rank 1 calls all_reduce. Rank 1 raises in its call (it
    checks the root's fingerprint); rank 0's broadcast returns, and its next call raises
    the mismatch naming both calls."""

    def body(rank):
        data = _ones(compiled)
        if rank == 0:
            dist.broadcast(data, src=0)
            with pytest.raises((dist.CollectiveMismatchError, dist.PeerError)) as info:
                dist.barrier()
        else:
            with pytest.raises(dist.CollectiveMismatchError) as info:
                dist.all_reduce(data)
        return str(info.value)

    root, other = shm_run(2, body)
    assert "broadcast #1" in other and "all_reduce #1" in other, other
    assert "rank 1" in root and "broadcast #1" in root, root


@pytest.mark.parametrize("compiled", [True, False])
def test_ranks_waiting_on_a_root_that_left_in_another_call_raise_at_once(compiled):
    """World 3: rank 0 broadcasts as root (and leaves its round), ranks 1 and 2 call a small
    all_reduce (rank 0 reduces, the others wait for its "reduced"). They check rank 0's
    fingerprint before waiting for it, so they raise the mismatch at once, though rank 0
    makes no further call for a while (group timeout 30 s)."""
    import time

    def body(rank):
        data = _ones(compiled)
        if rank == 0:
            dist.broadcast(data, src=0)
            time.sleep(1.5)  # not a call on the group: nothing of rank 0's releases the others
            with pytest.raises((dist.CollectiveMismatchError, dist.PeerError)):
                dist.barrier()
            return None
        start = time.monotonic()
        # (its own check, or the other's verdict relayed: a PeerError quoting it)
        with pytest.raises((dist.CollectiveMismatchError, dist.PeerError)) as info:
            dist.all_reduce(data)
        return time.monotonic() - start, str(info.value)

    _, *others = shm_run(3, body)
    for took, message in others:
        assert took < 1.0 and "broadcast #1" in message and "all_reduce #1" in message, (took, message)


def test_a_cma_scatter_root_checks_the_others_before_waiting_for_them(monkeypatch):
    """Rank 0 scatters through single-copy reads (it waits until the others read its
    blocks); rank 1 broadcasts as root and leaves its round. Rank 0 checks rank 1's
    fingerprint before waiting for its done, which never comes: a mismatch at once."""
    import time

    monkeypatch.setenv("ACCORD_ALGORITHM", "scatter=cma")

    def body(rank):
        start = time.monotonic()
        if rank == 0:
            out = np.zeros(4, dtype=np.int64)
            with pytest.raises(dist.CollectiveMismatchError) as info:
                run("scatter", out, out, [np.ones(4, dtype=np.int64)] * 2, 0, root=0)
            return time.monotonic() - start, str(info.value)
        dist.broadcast(np.ones(4), src=1)
        time.sleep(1.5)
        with pytest.raises((dist.CollectiveMismatchError, dist.PeerError)):
            dist.barrier()
        return None

    (took, message), _ = shm_run(2, body)
    assert took < 1.0 and "broadcast #1" in message and "scatter #1" in message, (took, message)
