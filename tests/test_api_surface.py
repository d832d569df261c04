"""torch's API surface beyond the functional collectives (issue 29, items 4 and 5): the names
``torch.distributed`` has, the method-level API of a group (``pg.allreduce([t], opts)``…),
the ``*Options`` classes, the coalesced calls and ``_coalescing_manager``, torch's private
look-ups, ``breakpoint``, ``Work.get_future_result`` and the ``*_multigpu`` collectives on
lists of CPU buffers. Ranks are threads (tests/harness.py); results are closed forms.
"""

from __future__ import annotations

import types
import warnings
from datetime import timedelta

import numpy as np

import pytest

import accord
from accord.api import handles
from accord.group.work import Future, Work, WorkResult
from tests.harness import run_ranks

pytestmark = pytest.mark.timeout(60)

#: torch.distributed's public names accord does not have, and why (docs/reference/torch-compatibility.md)
NOT_PROVIDED = {
    "BackendConfig", "BuiltinCommHookType", "DeviceMesh", "GradBucket", "GroupName", "Logger",
    "ProcessGroupGloo", "ProcessGroupNCCL", "RankType", "Reducer", "algorithms", "autograd",
    "c10d_logger", "constants",
    "device_mesh", "distributed_c10d", "init_device_mesh", "log", "logging", "logging_handlers",
    "record_comm", "remote_device", "rpc", "sys", "timedelta", "torch", "traceback", "typing", "utils",
}


def test_every_public_name_of_torch_distributed_is_here_or_listed() -> None:
    torch_distributed = pytest.importorskip("torch.distributed")
    # Subpackages (fsdp, nn, tensor, …) appear in dir() once anything in the process imported
    # them; they are torch's own libraries on top of the API, not names of the API.
    theirs = {
        n for n in dir(torch_distributed)
        if not n.startswith("_") and not isinstance(getattr(torch_distributed, n), types.ModuleType)
    }
    missing = sorted(theirs - set(dir(accord)) - NOT_PROVIDED)
    assert not missing, f"torch.distributed names accord lacks (add them or list why not): {missing}"
    for name in ("_get_default_group", "_rank_not_in_group", "_get_process_group_name",
                 "_coalescing_manager", "_all_gather_base", "_reduce_scatter_base"):
        assert callable(getattr(accord, name)), name


def test_options_have_torch_fields_and_defaults() -> None:
    c10d = pytest.importorskip("torch._C._distributed_c10d")
    for name in ("AllreduceOptions", "AllreduceCoalescedOptions", "BroadcastOptions", "ReduceOptions",
                 "AllgatherOptions", "GatherOptions", "ScatterOptions", "ReduceScatterOptions",
                 "AllToAllOptions", "BarrierOptions"):
        theirs, ours = getattr(c10d, name)(), getattr(accord, name)()
        fields = {f for f in dir(theirs) if not f.startswith("_")}
        assert fields == set(vars(ours)), name
        for field in fields:
            value = getattr(theirs, field)
            if field == "reduceOp":
                assert ours.reduceOp == accord.ReduceOp.SUM and int(value.op) == 0
            else:
                assert getattr(ours, field) == value, (name, field)


def test_small_names() -> None:
    assert accord.default_pg_timeout == timedelta(minutes=30)
    assert accord.get_default_backend_for_device("cpu") == "accord"
    assert accord.get_default_backend_for_device("cuda:1") == "nccl"
    with pytest.raises(ValueError, match="Default backend not registered for device : xla"):
        accord.get_default_backend_for_device("xla")
    assert accord.GroupMember.NON_GROUP_MEMBER == -100
    assert accord._rank_not_in_group(accord.GroupMember.NON_GROUP_MEMBER)
    assert accord._rank_not_in_group(-100) and not accord._rank_not_in_group(None)
    with pytest.raises(ValueError, match="has not been initialized"):
        accord._get_default_group()


def _settled(error: BaseException | None) -> Work:
    future = Future()
    if error is None:
        future.set_result([])
    else:
        future.set_exception(error)
    return Work("all_reduce", [], future)


def test_get_future_result_says_how_the_work_ended() -> None:
    assert _settled(None).get_future_result().wait() == WorkResult.SUCCESS
    assert _settled(accord.DistTimeoutError("late")).get_future_result().wait() == WorkResult.TIMEOUT
    assert _settled(accord.PeerError("gone")).get_future_result().wait() == WorkResult.COMM_ERROR
    assert _settled(ValueError("odd")).get_future_result().wait() == WorkResult.UNKNOWN


def _values(arrays):
    return [a.tolist() for a in arrays]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_method_level_collectives(n: int) -> None:
    def body(rank: int):
        pg = accord._get_default_group()
        out = {"name": (pg.group_name, pg.group_desc, accord._get_process_group_name(pg), pg.size(), pg.rank())}
        x = np.array([rank + 1, 1])
        work = pg.allreduce([x])
        assert isinstance(work, accord.Work)
        work.wait()
        opts = accord.AllreduceOptions()
        opts.reduceOp, opts.asyncOp = accord.ReduceOp.MAX, False
        y = np.array([rank])
        assert pg.allreduce([y], opts).is_completed()  # blocking: a finished Work
        z = np.array([2])
        pg.allreduce(z, accord.ReduceOp.PRODUCT).wait()  # torch's (tensor, op) overload
        b = np.array([rank * 10])
        pg.broadcast(b, n - 1).wait()  # (tensor, root)
        bopts = accord.BroadcastOptions()
        bopts.rootRank = 0
        b2 = np.array([rank + 5])
        pg.broadcast([b2], bopts).wait()
        r = np.array([rank + 1])
        pg.reduce(r, n - 1, accord.ReduceOp.SUM).wait()
        outs = [np.zeros(1, dtype=np.int64) for _ in range(n)]
        pg.allgather([outs], [np.array([rank])]).wait()
        outs2 = [np.zeros(1, dtype=np.int64) for _ in range(n)]
        pg.allgather(outs2, np.array([rank * 2])).wait()
        base = np.zeros(n, dtype=np.int64)
        pg._allgather_base(base, np.array([rank + 7])).wait()
        rs = np.zeros(1, dtype=np.int64)
        pg.reduce_scatter([rs], [[np.array([rank + j]) for j in range(n)]]).wait()
        rsb = np.zeros(1, dtype=np.int64)
        pg._reduce_scatter_base(rsb, np.arange(n) + rank).wait()
        a2a = np.zeros(n, dtype=np.int64)
        pg.alltoall_base(a2a, np.arange(n) + 10 * rank, [], []).wait()
        a2l = [np.zeros(1, dtype=np.int64) for _ in range(n)]
        pg.alltoall(a2l, [np.array([100 * rank + j]) for j in range(n)]).wait()
        gopts = accord.GatherOptions()
        gathered = [np.zeros(1, dtype=np.int64) for _ in range(n)]
        pg.gather([gathered] if rank == 0 else [], [np.array([rank * 3])], gopts).wait()
        sopts = accord.ScatterOptions()
        sopts.rootRank = n - 1
        got = np.zeros(1, dtype=np.int64)
        pieces = [np.array([j * 4]) for j in range(n)] if rank == n - 1 else []
        pg.scatter([got], [pieces] if pieces else [], sopts).wait()
        pg.barrier().wait()
        barrier_opts = accord.BarrierOptions()
        barrier_opts.timeout = timedelta(seconds=5)
        pg.barrier(barrier_opts).wait()
        out.update(x=x.tolist(), y=y.tolist(), z=z.tolist(), b=b.tolist(), b2=b2.tolist(), r=r.tolist(),
                   outs=_values(outs), outs2=_values(outs2), base=base.tolist(), rs=rs.tolist(),
                   rsb=rsb.tolist(), a2a=a2a.tolist(), a2l=_values(a2l),
                   gathered=_values(gathered) if rank == 0 else None, got=got.tolist())
        return out

    total = n * (n + 1) // 2
    for rank, got in enumerate(run_ranks(n, body)):
        assert got["name"] == ("0", "default_pg", "0", n, rank)
        assert got["x"] == [total, n] and got["y"] == [n - 1] and got["z"] == [2**n]
        assert got["b"] == [(n - 1) * 10] and got["b2"] == [5]
        assert got["r"] == ([total] if rank == n - 1 else [rank + 1])
        assert got["outs"] == [[k] for k in range(n)] and got["outs2"] == [[2 * k] for k in range(n)]
        assert got["base"] == [k + 7 for k in range(n)]
        assert got["rs"] == got["rsb"] == [sum(k + rank for k in range(n))]
        assert got["a2a"] == [10 * k + rank for k in range(n)]
        assert got["a2l"] == [[100 * k + rank] for k in range(n)]
        assert got["gathered"] == ([[3 * k] for k in range(n)] if rank == 0 else None)
        assert got["got"] == [rank * 4]


def test_method_level_p2p_coalesced_and_subgroups() -> None:
    n = 3

    def body(rank: int):
        pg = accord.group.WORLD
        right, left = (rank + 1) % n, (rank - 1) % n
        send = pg.send([np.array([rank, 1])], right, 4)
        box = np.zeros(2, dtype=np.int64)
        pg.recv([box], left, 4).wait()
        send.wait()
        anyone = np.zeros(1, dtype=np.int64)
        if rank == 0:
            works = [pg.recv_anysource([anyone], 9)]
            works[0].wait()
            source = works[0].source_rank()
            pg.recv_anysource([anyone2 := np.zeros(1, dtype=np.int64)], 9).wait()
            sources = sorted([source, int(anyone2[0])])
        else:
            pg.send([np.array([rank])], 0, 9).wait()
            sources = None
        a, b = np.array([rank]), np.array([1.0, rank])
        opts = accord.AllreduceCoalescedOptions()
        work = pg.allreduce_coalesced([a, b], opts)
        work.wait()
        assert work.result() == [a, b]
        lists = [[np.zeros(1, dtype=np.int64), np.zeros(2, dtype=np.int64)] for _ in range(n)]
        pg.allgather_coalesced(lists, [np.array([rank]), np.array([rank, -rank])]).wait()
        outs = [np.zeros(n, dtype=np.int64), np.zeros(2 * n, dtype=np.int64)]
        pg.allgather_into_tensor_coalesced(outs, [np.array([rank]), np.array([rank, 1])]).wait()
        rs = [np.zeros(1, dtype=np.int64), np.zeros(2, dtype=np.int64)]
        pg.reduce_scatter_tensor_coalesced(rs, [np.arange(n), np.ones(2 * n, dtype=np.int64)]).wait()
        sub = accord.new_group([1, 2])
        sub_sum = None
        if rank in (1, 2):
            assert isinstance(sub, accord.ProcessGroup) and accord._get_process_group_name(sub) == sub.group_name
            s = np.array([rank])
            opts = accord.BroadcastOptions()
            opts.rootRank = 1  # a group rank: global rank 2
            sub.broadcast([s], opts).wait()
            sub_sum = s.tolist()
        else:
            assert accord._rank_not_in_group(sub)
        return (box.tolist(), sources, a.tolist(), b.tolist(), [_values(each) for each in lists],
                _values(outs), _values(rs), sub_sum)

    for rank, (box, sources, a, b, lists, outs, rs, sub) in enumerate(run_ranks(n, body)):
        assert box == [(rank - 1) % n, 1]
        assert sources == ([1, 2] if rank == 0 else None)
        assert a == [3] and b == [3.0, 3.0]
        assert lists == [[[k], [k, -k]] for k in range(n)]
        assert outs == [list(range(n)), [v for k in range(n) for v in (k, 1)]]
        assert rs == [[n * rank], [n, n]]
        assert sub == ([2] if rank in (1, 2) else None)


def test_coalesced_functions_and_the_coalescing_manager() -> None:
    n = 2

    def body(rank: int):
        tensors = [np.array([rank + 1]), np.array([2.0, rank])]
        with pytest.warns(FutureWarning, match="all_reduce_coalesced` will be deprecated"):
            assert accord.all_reduce_coalesced(tensors) is None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            future = accord.all_reduce_coalesced([x := np.array([1])], async_op=True)
            assert isinstance(future, accord.Future)  # torch returns the Future here
            future.wait()
            lists = [[np.zeros(1, dtype=np.int64)] for _ in range(n)]
            assert accord.all_gather_coalesced(lists, [np.array([rank * 5])]) is None
        buckets = [np.array([rank, 1]), np.array([10 * rank])]
        with accord._coalescing_manager(async_ops=True) as cm:
            for bucket in buckets:
                accord.all_reduce(bucket, async_op=True)
        assert len(cm.works) == 2
        cm.wait()
        blocking = [np.array([rank])]
        with accord._coalescing_manager() as cm2:
            accord.all_reduce(blocking[0], async_op=True)
        assert cm2.works[0].is_completed()  # the block's end waited for it
        out = np.zeros(n, dtype=np.int64)
        accord._all_gather_base(out, np.array([rank + 3]))
        rsb = np.zeros(1, dtype=np.int64)
        accord._reduce_scatter_base(rsb, np.array([1, 2]) * (rank + 1))
        return (_values(tensors), x.tolist(), _values([lst[0] for lst in lists]), _values(buckets),
                blocking[0].tolist(), out.tolist(), rsb.tolist())

    for rank, (tensors, x, lists, buckets, blocking, out, rsb) in enumerate(run_ranks(n, body)):
        assert tensors == [[3], [4.0, 1.0]] and x == [2]
        assert lists == [[0], [5]] and buckets == [[1, 2], [10]] and blocking == [1]
        assert out == [3, 4] and rsb == [3 * (rank + 1)]


def test_breakpoint_stops_one_rank_and_the_others_wait(monkeypatch) -> None:
    stopped = []

    class Debugger:
        def message(self, text: str) -> None:
            assert "dist.breakpoint(rank=1)" in text

        def set_trace(self, frame) -> None:
            stopped.append(frame.f_code.co_name)

    monkeypatch.setattr(handles, "make_pdb", Debugger)

    def body(rank: int):
        for _ in range(2):
            accord.breakpoint(rank=1, skip=1, timeout_s=77)  # the first call from here passes
        return accord.group.WORLD.timeout.total_seconds()

    assert run_ranks(3, body) == [77.0] * 3
    assert stopped == ["body"]  # once, on rank 1, in the caller's frame


def _multigpu_body(n: int, devices: int, dtype: str, op_name: str):
    op = getattr(accord.ReduceOp, op_name)

    def body(rank: int):
        def value(x: int) -> int:  # device x of the world (rank × devices + j)
            return x % 3 + 1

        tl = [np.array([value(rank * devices + j), 2], dtype=dtype) for j in range(devices)]
        accord.all_reduce_multigpu(tl, op)
        bl = [np.array([rank * 10 + j], dtype=dtype) for j in range(devices)]
        accord.broadcast_multigpu(bl, src=n - 1, src_tensor=devices - 1)
        rl = [np.array([value(rank * devices + j)], dtype=dtype) for j in range(devices)]
        work = accord.reduce_multigpu(rl, dst=0, op=op, async_op=True, dst_tensor=devices - 1)
        work.wait()
        outs = [[np.zeros(1, dtype=dtype) for _ in range(n * devices)] for _ in range(devices)]
        accord.all_gather_multigpu(outs, [np.array([rank * devices + j], dtype=dtype) for j in range(devices)])
        rs = [np.zeros(1, dtype=dtype) for _ in range(devices)]
        ins = [[np.array([value(x + i)], dtype=dtype) for x in range(n * devices)] for i in range(devices)]
        accord.reduce_scatter_multigpu(rs, ins, op)
        return _values(tl), _values(bl), _values(rl), [_values(o) for o in outs], _values(rs)

    return body


REDUCE = {"SUM": sum, "MAX": max, "MIN": min, "PRODUCT": np.prod}


@pytest.mark.parametrize(("n", "devices", "dtype", "op_name"), [
    (1, 1, "int64", "SUM"), (1, 3, "float32", "PRODUCT"), (2, 2, "int32", "MAX"),
    (3, 2, "float64", "SUM"), (3, 3, "int64", "MIN"), (4, 2, "int16", "PRODUCT"),
])
def test_multigpu_on_cpu_lists(n: int, devices: int, dtype: str, op_name: str) -> None:
    fold = REDUCE[op_name]
    world = n * devices
    every = [x % 3 + 1 for x in range(world)]
    for rank, (tl, bl, rl, outs, rs) in enumerate(run_ranks(n, _multigpu_body(n, devices, dtype, op_name))):
        assert tl == [[fold(every), fold([2] * world)]] * devices
        assert bl == [[(n - 1) * 10 + devices - 1]] * devices
        mine = [[every[rank * devices + j]] for j in range(devices)]
        assert rl == (mine[:-1] + [[fold(every)]] if rank == 0 else mine)
        assert outs == [[[x] for x in range(world)]] * devices
        assert rs == [[fold([(rank * devices + j + i) % 3 + 1 for i in range(devices)] * n)]
                      for j in range(devices)]


def test_multigpu_avg_divides_by_the_number_of_devices_and_takes_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    n, devices = 2, 3

    def body(rank: int):
        floats = [torch.full((2,), float(rank * devices + j)) for j in range(devices)]
        accord.all_reduce_multigpu(floats, accord.ReduceOp.AVG)
        ints = [np.array([rank * devices + j + 1]) for j in range(devices)]
        accord.all_reduce_multigpu(ints, accord.ReduceOp.AVG)
        rs = [torch.zeros(1) for _ in range(devices)]
        accord.reduce_scatter_multigpu(rs, [[torch.tensor([float(x)]) for x in range(n * devices)]] * devices,
                                       accord.ReduceOp.AVG)
        return [t.tolist() for t in floats], _values(ints), [t.item() for t in rs]

    world = n * devices
    for rank, (floats, ints, rs) in enumerate(run_ranks(n, body)):
        assert floats == [[sum(range(world)) / world] * 2] * devices
        assert ints == [[sum(range(1, world + 1)) // world]] * devices  # truncated, as NCCL's
        assert rs == [float(rank * devices + j) for j in range(devices)]


def test_multigpu_refuses_bad_lists_before_anything_moves() -> None:
    def body(rank: int):
        errors = []
        for call in (
            lambda: accord.all_reduce_multigpu([]),
            lambda: accord.all_reduce_multigpu([np.zeros(2), np.zeros(3)]),
            lambda: accord.all_reduce_multigpu([np.zeros(2), np.zeros(2, dtype=np.int32)]),
            lambda: accord.broadcast_multigpu([np.zeros(1)], src=0, src_tensor=1),
            lambda: accord.all_gather_multigpu([[np.zeros(1)] * 4], [np.zeros(1), np.zeros(1)]),
            lambda: accord.reduce_scatter_multigpu([np.zeros(1)], [[np.zeros(1)]]),
        ):
            with pytest.raises((ValueError, TypeError)) as info:
                call()
            errors.append(type(info.value).__name__)
        x = [np.array([rank + 1])]
        accord.all_reduce_multigpu(x)  # the group still works
        other = accord.new_group([0])
        non_member = None
        if rank == 1:
            with pytest.warns(UserWarning, match="does not belong to the given group"):
                non_member = accord.all_reduce_multigpu([np.zeros(1)], group=other)
        return errors, x[0].tolist(), non_member

    for errors, x, non_member in run_ranks(2, body):
        assert len(errors) == 6 and x == [3] and non_member is None


def test_multigpu_lists_of_different_lengths_raise_on_every_rank() -> None:
    """all_reduce's, broadcast's and reduce's messages do not change with the list's length:
    the ranks agree on it first, so a mismatch is an error everywhere, never a wrong sum."""

    def body(rank: int):
        devices = 2 + rank  # rank 0 passes 2 buffers, rank 1 passes 3
        messages = []
        for call in (
            lambda: accord.all_reduce_multigpu([np.ones(2)] * devices, accord.ReduceOp.AVG),
            lambda: accord.broadcast_multigpu([np.ones(2)] * devices, src=0),
            lambda: accord.reduce_multigpu([np.ones(2)] * devices, dst=1),
        ):
            with pytest.raises(ValueError) as info:
                call()
            messages.append(str(info.value))
        x = [np.ones(1), np.ones(1)]
        accord.all_reduce_multigpu(x)  # equal lengths again: the group still works
        return messages, x[0].tolist()

    for rank, (messages, x) in enumerate(run_ranks(2, body)):
        assert x == [4.0]
        for what, message in zip(("all_reduce", "broadcast", "reduce"), messages):
            assert message.startswith(f"{what}_multigpu: every rank must pass a list of the same length")
            assert f"this rank passed {2 + rank}, the group's lists are 2 to 3 long" in message
