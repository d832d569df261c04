"""The blocking fast path's tensor checks: a cached NumPy view is handed out only for a tensor
that is plain right now, never for another tensor that happens to share its memory.

``plain_array`` caches views by (address, length, dtype); these tests make the cases where a
cache hit would be wrong (a transposed or negated view of the same memory, a meta tensor whose
address is 0) and the ops map (``fast_op``) for every plain ReduceOp.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from accord.integrations.torch.tensors import fast_op, plain_array  # noqa: E402
from accord.reduce_ops import RedOpType  # noqa: E402


def test_a_plain_tensor_gets_a_view_of_its_own_memory() -> None:
    t = torch.arange(6, dtype=torch.float32)
    view = plain_array(t)
    assert view is not None and view.dtype == np.float32 and view.shape == (6,)
    view[0] = 42.0
    assert t[0].item() == 42.0  # the same memory, no copy
    assert plain_array(t) is view  # cached


def test_views_of_the_same_memory_that_are_not_plain_get_none() -> None:
    m = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    assert plain_array(m) is not None  # caches (address, 6, float64)
    assert plain_array(m.t()) is None  # same address and length, not contiguous
    assert plain_array(torch._neg_view(m)) is None  # same memory, negation bit set
    assert plain_array(m[:, ::2]) is None


@pytest.mark.parametrize("make", [
    lambda: torch.ones(4).to_sparse(),
    lambda: torch.ones(4, device="meta"),
    lambda: torch.ones(0, device="meta"),
    lambda: torch.ones(4, dtype=torch.bfloat16),
    lambda: torch.ones(4, dtype=torch.complex64),
    lambda: torch.nn.Parameter(torch.ones(4)),  # a subclass: the general path handles it
], ids=["sparse", "meta", "empty-meta", "bfloat16", "complex", "parameter"])
def test_anything_but_a_plain_cpu_tensor_gets_none(make) -> None:
    assert plain_array(make()) is None


def test_an_empty_cpu_tensor_is_plain_and_a_meta_one_sharing_its_key_is_not() -> None:
    empty = torch.ones(0)
    assert plain_array(empty) is not None and plain_array(empty).size == 0
    assert plain_array(torch.ones(0, device="meta")) is None


@pytest.mark.parametrize("name", ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"])
def test_fast_op_maps_every_plain_op(name: str) -> None:
    assert fast_op(dist.ReduceOp(getattr(dist.ReduceOp, name))) is RedOpType[name]


def test_fast_op_leaves_premul_sum_to_the_general_path() -> None:
    assert fast_op(dist._make_nccl_premul_sum(2.0)) is None


_HUGE_PAGES_PROGRAM = r"""
import os, sys
import torch, torch.distributed as dist
from accord.bench.runner import free_port
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
dist.init_process_group("accord")
t = torch.ones(4 << 20)  # 16 MiB, made after init as programs usually do
addr, huge = t.data_ptr(), None
with open("/proc/self/smaps") as smaps:
    inside = False
    for line in smaps:
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            inside = lo <= addr < hi
        elif inside and head[0] == "AnonHugePages:":
            huge = int(head[1])
            break
dist.destroy_process_group()
print(os.environ["THP_MEM_ALLOC_ENABLE"], huge)
"""


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read()
    except OSError:
        return ""


@pytest.mark.parametrize("setting, huge_pages", [(None, True), ("0", False)])
def test_large_tensors_made_after_init_get_huge_pages_unless_the_user_says_no(
        setting: str | None, huge_pages: bool) -> None:
    """The single-copy path moves huge pages about twice as fast as 4 KiB ones."""
    import os
    import subprocess
    import sys

    if "[never]" in _thp_mode() or not _thp_mode():
        pytest.skip("transparent huge pages are off on this machine")
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if setting is not None:
        env["THP_MEM_ALLOC_ENABLE"] = setting
    done = subprocess.run([sys.executable, "-c", _HUGE_PAGES_PROGRAM], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    value, huge = done.stdout.split()
    assert value == (setting or "1")
    assert (int(huge) > 0) == huge_pages, done.stdout


@pytest.mark.filterwarnings("ignore:`torch.distributed.*` is deprecated:FutureWarning")
def test_a_call_refused_on_a_fast_path_is_counted_and_explained_with_the_shapes() -> None:
    """The fast paths plan on flat views; a refused call still counts as a call this rank
    left by an exception (``calls_raised``, as the API's pipeline counts it), and its error
    shows the tensors as the caller shaped them (world 1, in this process)."""
    import accord  # noqa: F401 — registers backend "accord"

    dist.init_process_group("accord", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = dist.distributed_c10d._get_default_group().accord_group
        with pytest.raises(ValueError, match="BAND"):
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)  # no bitwise op on floats
        assert group.calls_raised == 1
        for async_op in (False, True):
            with pytest.raises(ValueError, match=r"float32\[2, 5\]"):
                dist.all_gather_into_tensor(torch.zeros(2, 5), torch.ones(2, 3), async_op=async_op)
            with pytest.raises(ValueError, match=r"float32\[2, 5\]"):
                dist.reduce_scatter_tensor(torch.zeros(2, 3), torch.ones(2, 5), async_op=async_op)
        assert group.calls_raised == 5
        out = torch.zeros(2, 3)  # the group still works
        dist.all_gather_into_tensor(out, torch.ones(2, 3))
        assert out.sum().item() == 6.0
    finally:
        dist.destroy_process_group()


def test_blocking_scatter_and_gather_take_the_short_path_and_refusals_the_general_one(monkeypatch) -> None:
    """dist.scatter and dist.gather, blocking, on plain tensors go straight to the short path
    (no Work made); an async call, and a list the short path refuses, take the general path,
    which explains the refusal (world 1, in this process)."""
    import accord  # noqa: F401 — registers backend "accord"
    from accord.group import collective_ops

    taken: list[str] = []
    for name in ("scatter_short", "gather_short"):
        real = getattr(collective_ops, name)
        monkeypatch.setattr(collective_ops, name,
                            lambda group, args, real=real, name=name: (taken.append(name), real(group, args))[1])
    dist.init_process_group("accord", store=dist.HashStore(), rank=0, world_size=1)
    try:
        out = torch.zeros(3)
        assert dist.scatter(out, [torch.arange(3.0)], src=0) is None
        assert out.tolist() == [0.0, 1.0, 2.0]
        got = [torch.zeros(2, 2)]
        dist.gather(torch.full((2, 2), 7.0), got, dst=0)
        assert got[0].tolist() == [[7.0, 7.0], [7.0, 7.0]]
        assert taken == ["scatter_short", "gather_short"]
        work = dist.scatter(out, [torch.ones(3)], src=0, async_op=True)
        work.wait()
        assert out.tolist() == [1.0, 1.0, 1.0] and taken == ["scatter_short", "gather_short"]
        with pytest.raises(ValueError, match="scatter_list"):
            dist.scatter(out, [torch.ones(4)], src=0)  # another size than the output: refused
    finally:
        dist.destroy_process_group()


def test_blocking_reduce_takes_the_short_path_and_the_rest_the_general_one(monkeypatch) -> None:
    """dist.reduce, blocking, on a plain tensor with a plain ReduceOp goes straight to the
    short path; PREMUL_SUM, an async call and a non-contiguous tensor take the general path
    (world 1, in this process)."""
    import accord  # noqa: F401 — registers backend "accord"
    from accord.group import collective_ops

    taken: list[Any] = []
    real = collective_ops.reduce_short
    monkeypatch.setattr(collective_ops, "reduce_short",
                        lambda group, args: (taken.append(args[1:]), real(group, args))[1])
    dist.init_process_group("accord", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.arange(4.0)
        assert dist.reduce(t, dst=0, op=dist.ReduceOp.MAX) is None
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0] and len(taken) == 1 and taken[0][0] == 0
        dist.reduce(t, dst=0, op=dist._make_nccl_premul_sum(2.0))
        assert t.tolist() == [0.0, 2.0, 4.0, 6.0]
        dist.reduce(t, dst=0, async_op=True).wait()
        strided = torch.arange(8.0)[::2]
        dist.reduce(strided, dst=0)
        assert strided.tolist() == [0.0, 2.0, 4.0, 6.0] and len(taken) == 1
        with pytest.raises(ValueError, match="dst"):
            dist.reduce(t, dst=3)  # not a rank of the world: torch's own error
    finally:
        dist.destroy_process_group()


def test_blocking_list_forms_take_the_short_path_and_the_rest_the_general_one(monkeypatch) -> None:
    """dist.all_gather (list), dist.reduce_scatter (list), dist.all_to_all_single (even, or
    with split sizes) and dist.all_to_all, blocking, on plain tensors go straight to their
    short paths; the async forms of the list all_gather and reduce_scatter and of
    all_to_all_single and all_to_all (and torch's functional all_to_all_single) are queued
    as theirs; split sizes given as a tensor and a refused list take the general path, which explains the refusal (world 1, in this
    process)."""
    import accord  # noqa: F401 — registers backend "accord"
    from accord.group import collective_ops

    names = ("all_gather_short", "reduce_scatter_short", "all_to_all_single_short", "all_to_all_short",
             "all_to_all_single_queued", "all_gather_queued", "reduce_scatter_queued", "all_to_all_queued")
    taken: list[str] = []
    for name in names:
        real = getattr(collective_ops, name)
        monkeypatch.setattr(collective_ops, name,
                            lambda group, *args, real=real, name=name: (taken.append(name), real(group, *args))[1])
    dist.init_process_group("accord", store=dist.HashStore(), rank=0, world_size=1)
    try:
        got = [torch.zeros(2, 2)]
        assert dist.all_gather(got, torch.full((2, 2), 3.0)) is None
        out = torch.zeros(3)
        dist.reduce_scatter(out, [torch.arange(3.0)], op=dist.ReduceOp.MAX)
        single = torch.zeros(4)
        dist.all_to_all_single(single, torch.arange(4.0))
        outs = [torch.zeros(2)]
        dist.all_to_all(outs, [torch.ones(2)])
        assert taken == list(names[:4])
        assert got[0].tolist() == [[3.0, 3.0], [3.0, 3.0]] and out.tolist() == [0.0, 1.0, 2.0]
        assert single.tolist() == [0.0, 1.0, 2.0, 3.0] and outs[0].tolist() == [1.0, 1.0]

        dist.all_to_all_single(single, torch.full((4,), 2.0), [4], [4])  # with split sizes
        dist.all_to_all_single(single, torch.full((4,), 3.0), [4], [4], async_op=True).wait()
        funcol = torch.ops._c10d_functional
        back = funcol.wait_tensor(funcol.all_to_all_single(torch.full((4,), 4.0), [4], [4], "0"))
        assert single.tolist() == [3.0] * 4 and back.tolist() == [4.0] * 4
        assert taken == list(names[:4]) + ["all_to_all_single_short"] + ["all_to_all_single_queued"] * 2

        taken.clear()
        work = dist.all_gather(got, torch.ones(2, 2), async_op=True)
        assert taken == ["all_gather_queued"]
        work.wait()
        assert got[0].tolist() == [[1.0, 1.0], [1.0, 1.0]] and work.result() == [got]
        dist.reduce_scatter(out, [torch.ones(3)], async_op=True).wait()
        assert out.tolist() == [1.0, 1.0, 1.0] and taken == ["all_gather_queued", "reduce_scatter_queued"]
        dist.all_to_all(outs, [torch.full((2,), 5.0)], async_op=True).wait()
        assert outs[0].tolist() == [5.0, 5.0]
        assert taken == ["all_gather_queued", "reduce_scatter_queued", "all_to_all_queued"]
        dist.all_to_all_single(single, torch.ones(4), torch.tensor([4]), [4])  # sizes as a tensor
        assert single.tolist() == [1.0] * 4 and "all_to_all_single_short" in taken  # tried, refused
        taken.clear()
        with pytest.raises(ValueError, match="tensor_list"):
            dist.all_gather([torch.zeros(3)], torch.ones(2))  # another size than the input
        with pytest.raises(ValueError, match="tensor_list"):
            dist.all_gather([torch.zeros(3)], torch.ones(2), async_op=True)  # refused at the call
        assert taken == ["all_gather_short", "all_gather_queued"]  # tried, refused, explained
        with pytest.raises(ValueError, match="split_sizes"):
            dist.all_to_all_single(single, torch.ones(4), [3], [4], async_op=True)  # refused at the call
    finally:
        dist.destroy_process_group()


def test_all_to_all_single_cuts_dim_0_of_a_2d_tensor_on_its_fast_path(monkeypatch) -> None:
    """The fast path sees a tensor's memory as a flat array: all_to_all_single, which cuts
    dim 0, must see it in the tensor's shape (rows, not elements), and refuse split sizes
    that count elements (world 1, in this process)."""
    import accord  # noqa: F401 — registers backend "accord"
    from accord.group import collective_ops, short_all_to_all

    taken: list[Any] = []
    real = collective_ops.all_to_all_single_short
    monkeypatch.setattr(collective_ops, "all_to_all_single_short",
                        lambda group, args: (taken.append(args[0].shape), real(group, args))[1])
    dist.init_process_group("accord", store=dist.HashStore(), rank=0, world_size=1)
    try:
        out = torch.zeros(2, 3)
        dist.all_to_all_single(out, torch.arange(6.0).reshape(2, 3), [2], [2])  # 2 rows
        assert out.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and taken == [(2, 3)]
        with pytest.raises(ValueError, match="sum to 6, but output has 2 rows"):
            dist.all_to_all_single(out, torch.ones(2, 3), [6], [6])  # elements, not rows
        # split sizes that change every call are kept as plans only while the cache has room
        group = dist.distributed_c10d._get_default_group().accord_group
        group.plans.update({("filler", i): None for i in range(short_all_to_all.SPLIT_PLANS_ROOM)})
        held = len(group.plans)
        for rows in (3, 4):
            got = torch.zeros(rows, 3)
            dist.all_to_all_single(got, torch.ones(rows, 3), [rows], [rows])
            assert got.tolist() == [[1.0] * 3] * rows
        assert len(group.plans) == held
    finally:
        dist.destroy_process_group()
