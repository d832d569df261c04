"""SPMD scripts that run unchanged on ``torch.distributed`` and on ``accord``.

A script is ``fn(dist, rank, world_size, make) -> dict``. ``dist`` is the distributed module
(``torch.distributed`` or ``accord``), ``make(values, dtype_name)`` builds a buffer (a torch
tensor or a NumPy array) from nested Python lists, and the dict it returns holds only plain
Python values (dicts, lists, ints, floats, bools, strings, None), so per-rank results from
different implementations compare with ``==``.

Data are small integers or exact binary fractions, so every reduction is exact whatever order
an implementation combines the inputs in (the one AVG value that is not exact is divided
once, after an exact sum, and so rounds the same everywhere).

Scripts with ``on_gloo=False`` use features gloo lacks (or where gloo errors): only accord runs
them, and test_differential.py checks their results against closed forms.

This module must not import torch: the accord-numpy children never load it.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

Make = Callable[[Any, str], Any]
ScriptFn = Callable[[Any, int, int, Make], dict]


@dataclass(frozen=True)
class Script:
    name: str
    fn: ScriptFn
    on_gloo: bool = True        # False: gloo lacks it; accord is checked against closed forms
    needs_torch: bool = False   # the buffers must be torch tensors (bfloat16 has no NumPy type)


# -- helpers -----------------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """Nested lists of Python scalars; a complex number becomes [real, imag]."""
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def dtype_name(buf: Any) -> str:
    return str(buf.dtype).removeprefix("torch.")


def state(buf: Any) -> dict:
    """What a buffer holds: values, element type and shape."""
    return {"values": plain(buf.tolist()), "dtype": dtype_name(buf), "shape": list(buf.shape)}


def returned(value: Any) -> Any:
    """A call's return value as plain data: None stays None, anything else is its type name."""
    return None if value is None else type(value).__name__


def joined_group(dist: Any, **kwargs: Any) -> Any:
    """new_group() of every rank, then a barrier on the default group (whose timeout is the
    long one: the new group's may be short) before it is handed out.

    gloo's new_group can return on a rank before its peers have finished connecting to it (the
    connecting side of a pair is done before the accepting side has read its handshake). A
    script that then destroys the group, or leaves it after a call one rank refuses without
    sending anything, closes sockets a late peer is still reading: that peer's connectFullMesh
    fails with "Connection closed by peer" (seen in CI at world size 4). The barrier makes
    every rank finish joining first: no rank gets past it before all have left new_group."""
    group = dist.new_group(**kwargs)
    dist.barrier()
    return group


def check_plain(value: Any, where: str = "result") -> None:
    """Raise TypeError unless ``value`` is made of plain Python data only."""
    if value is None or type(value) in (bool, int, float, str):
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"{where}: key {key!r} is not a str")
            check_plain(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__name__}, not plain data")


def quietly(fn: Callable[[], Any]) -> Any:
    """Call ``fn`` with warnings silenced (non-member calls and deprecated names warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def raises(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001 — only "did it refuse" is compared; messages differ
        return True
    return False


# -- rank-dependent inputs (exact under every op) ----------------------------------------------

def signed_values(rank: int, n: int) -> list[int]:
    return [rank + 1, -(rank + 2), 3 * rank - 4, (7 * rank) % 5, 100 + rank, -1 - 2 * rank, 0,
            1 << rank, 5]


def unsigned_values(rank: int, n: int) -> list[int]:
    return [rank + 1, 2 * rank + 3, 250 - rank, (7 * rank) % 5, 17 * rank + 1, 0, 1 << rank, 255]


def float_values(rank: int, n: int) -> list[float]:
    # Partial products of every subset are integers < 2048 or powers of two: exact in float16.
    return [rank + 1.0, -(rank + 2.0), 0.5 * rank, 3.0 * rank - 4, 2.0 ** -rank, 8.0 - rank, 0.0,
            float(n)]


def bool_values(rank: int, n: int) -> list[bool]:
    return [rank % 2 == 0, True, False, rank == 0, rank == n - 1]


def complex_values(rank: int, n: int) -> list[complex]:
    return [complex(rank + 1, -rank), complex(2 * rank, 3), complex(-1, 0.5 * rank), complex(n, n)]


INT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
FLOAT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")
COMPLEX_OPS = ("SUM", "AVG")

VALUES: dict[str, Callable[[int, int], list]] = {
    "int8": signed_values, "int16": signed_values, "int32": signed_values, "int64": signed_values,
    "uint8": unsigned_values, "uint16": unsigned_values, "uint32": unsigned_values,
    "uint64": unsigned_values,
    "float16": float_values, "bfloat16": float_values, "float32": float_values,
    "float64": float_values,
    "complex64": complex_values, "complex128": complex_values,
    "bool": bool_values,
}


def op_sweep(dtype: str, ops: tuple[str, ...]) -> ScriptFn:
    """all_reduce one rank-dependent tensor of ``dtype`` with each op in turn."""
    def fn(dist: Any, rank: int, n: int, make: Make) -> dict:
        out = {}
        for op in ops:
            t = make(VALUES[dtype](rank, n), dtype)
            ret = dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            out[op] = {"result": state(t), "returned": returned(ret)}
        return out
    return fn


# -- all_reduce --------------------------------------------------------------------------------

def docs_all_reduce_int64(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' example: tensor = arange(2) + 1 + 2 * rank; SUM gives the same on all ranks."""
    tensor = make([1 + 2 * rank, 2 + 2 * rank], "int64")
    before = state(tensor)
    ret = dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return {"before": before, "after": state(tensor), "returned": returned(ret)}


def docs_all_reduce_cfloat(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The docs' complex example: [1+1j, 2+2j] + 2 * rank * (1+1j), cfloat, SUM."""
    tensor = make([complex(1 + 2 * rank, 1 + 2 * rank), complex(2 + 2 * rank, 2 + 2 * rank)],
                  "complex64")
    before = state(tensor)
    ret = dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return {"before": before, "after": state(tensor), "returned": returned(ret)}


def all_reduce_default_op(dist: Any, rank: int, n: int, make: Make) -> dict:
    """op defaults to SUM; ReduceOp given as an instance, as RedOpType, and as reduce_op."""
    out = {}
    t = make([rank, 1, -rank], "int64")
    dist.all_reduce(t)
    out["default"] = state(t)
    t = make([rank, 1, -rank], "int64")
    dist.all_reduce(t, op=dist.ReduceOp(dist.ReduceOp.MAX))
    out["instance_max"] = state(t)
    t = make([rank, 1, -rank], "int64")
    dist.all_reduce(t, op=dist.ReduceOp.RedOpType.MIN)
    out["redoptype_min"] = state(t)
    t = make([rank, 1, -rank], "int64")
    quietly(lambda: dist.all_reduce(t, op=dist.reduce_op.MAX))
    out["deprecated_reduce_op_max"] = state(t)
    return out


def all_reduce_overflow_wraps(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Integer SUM/PRODUCT wrap around modulo 2**bits, as torch's integer arithmetic does."""
    out = {}
    cases = [
        ("int8", "SUM", [120, -120, 127, -128, 64 + rank, rank]),
        ("int8", "PRODUCT", [100, -100, 16 + rank, -128]),
        ("uint8", "SUM", [255, 200 + rank, 128]),
        ("uint8", "PRODUCT", [16, 255 - rank, 3]),
        ("int32", "SUM", [2**31 - 1, -2**31, 2**30 + rank]),
        ("int64", "SUM", [2**63 - 1, -2**63, 2**62 + rank]),
        ("int64", "PRODUCT", [2**32 + rank, -(2**31)]),
    ]
    for dtype, op, values in cases:
        t = make(values, dtype)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        out[f"{dtype}-{op}"] = state(t)
    return out


def all_reduce_shapes(dist: Any, rank: int, n: int, make: Make) -> dict:
    """0-d, empty, 2-D and transposed (non-contiguous but dense) buffers are reduced in place."""
    out = {}
    t = make(rank + 3, "int64")
    dist.all_reduce(t)
    out["scalar"] = state(t)
    t = make([], "float32")
    dist.all_reduce(t)
    out["empty"] = state(t)
    t = make([[rank, 1, 2], [3, 4, 5 * rank]], "int32")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["2d"] = state(t)
    base = make([[rank, 1, 2], [3, 4, 5 * rank]], "float64")
    view = base.T
    dist.all_reduce(view)
    out["transposed_view"] = state(view)
    out["transposed_base"] = state(base)
    return out


def all_reduce_async(dist: Any, rank: int, n: int, make: Make) -> dict:
    """async_op=True: several in flight, waited in reverse; Work.wait and get_future().wait()."""
    t1 = make([rank + 1, 2], "int64")
    t2 = make([[rank, -rank], [1.5, 2.0 * rank]], "float32")
    t3 = make([rank + 7, 3 - rank], "int32")
    w1 = dist.all_reduce(t1, async_op=True)
    w2 = dist.all_reduce(t2, op=dist.ReduceOp.MAX, async_op=True)
    w3 = dist.all_reduce(t3, op=dist.ReduceOp.MIN, async_op=True)
    out = {"wait3": w3.wait(), "wait2": w2.wait()}
    fut = w1.get_future()
    value = fut.wait()
    out["future_value"] = [state(v) for v in value]
    out["future_done"] = fut.done()
    out["wait1_after_future"] = w1.wait()
    # after every wait: gloo marks a Work completed a moment after its future (a race)
    out["completed"] = [w.is_completed() for w in (w1, w2, w3)]
    out["t1"], out["t2"], out["t3"] = state(t1), state(t2), state(t3)
    t4 = make([rank + 1], "int64")
    w4 = dist.all_reduce(t4, op=dist.ReduceOp.PRODUCT, async_op=True)
    chained = w4.get_future().then(lambda f: plain(f.value()[0].tolist()))
    out["then"] = chained.wait()
    out["t4"] = state(t4)
    return out


def summary(buf: Any) -> dict:
    """A large 1-D buffer in brief: element type, count, sum, ends and a digest of all values."""
    values = plain(buf.tolist())
    return {"dtype": dtype_name(buf), "shape": list(buf.shape), "sum": sum(values),
            "head": values[:4], "tail": values[-4:],
            "digest": hashlib.sha256(repr(values).encode()).hexdigest()[:16]}


# Elements of the large buffers: 80-320 KB, over accord's 64 KiB small-message limit, not a
# multiple of 3 or 4, and several shared-memory slots or TCP segments in runner's setups.
LARGE = 40_003


def large_buffers(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Big buffers (accord's default choice switches to ring all_reduce and pipelined
    broadcast); integer values, so sums are exact in every order."""
    out = {}
    t = make([(i % 1000) * (rank + 1) - 7 * rank for i in range(LARGE)], "int64")
    dist.all_reduce(t)
    out["int64_sum"] = summary(t)
    t = make([float((i * (rank + 3)) % 101) for i in range(LARGE)], "float32")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["float32_max"] = summary(t)
    t = make([float(i % 9 + rank) for i in range(LARGE)], "float32")
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    out["float32_sum_async"] = summary(t)
    t = make([float(i % 5 - rank) for i in range(LARGE)], "float16")
    dist.all_reduce(t)
    out["float16_sum"] = summary(t)
    t = make([float(i % 17 + 100 * rank) for i in range(LARGE)], "float64")
    dist.broadcast(t, src=n - 1)
    out["float64_broadcast"] = summary(t)
    return out


# -- broadcast ---------------------------------------------------------------------------------

def broadcast_every_root(dist: Any, rank: int, n: int, make: Make) -> dict:
    """broadcast(tensor, src) from each root in turn: everyone ends with the root's data."""
    out = {}
    for root in range(n):
        t = make([10 * rank + i for i in range(3)], "int64")
        ret = dist.broadcast(t, src=root)
        out[f"root{root}"] = {"result": state(t), "returned": returned(ret)}
    return out


def broadcast_dtypes(dist: Any, rank: int, n: int, make: Make) -> dict:
    """broadcast of several element types and shapes, from the last rank."""
    root = n - 1
    out = {}
    cases = [
        ("float32", [[rank, 0.5], [-1.0, 2.0 * rank]]),
        ("float64", [rank + 0.25, -rank]),
        ("float16", [rank, 1.5, -2.0]),
        ("complex128", [complex(rank, -1), complex(2, rank)]),
        ("bool", [rank % 2 == 0, rank == root, True]),
        ("uint8", [rank, 255, 7 * rank]),
        ("int8", [-rank, 127, -128]),
        ("int32", [[[rank]], [[-rank]]]),
    ]
    for dtype, values in cases:
        t = make(values, dtype)
        dist.broadcast(t, src=root)
        out[dtype] = state(t)
    t = make(rank, "int64")
    dist.broadcast(t, src=0)
    out["scalar"] = state(t)
    t = make([], "float64")
    dist.broadcast(t, src=0)
    out["empty"] = state(t)
    base = make([[rank, 1, 2], [3, 4, 5 * rank]], "int64")
    view = base.T
    dist.broadcast(view, src=root)
    out["transposed_base"] = state(base)
    return out


def docs_broadcast_params(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The broadcast tutorial: rank 0 holds the model's parameters, the others get them."""
    if rank == 0:
        params = [make([0.5, 1.0, 1.5, 2.0], "float32"), make([[1.0, 2.0], [3.0, 4.0]], "float64")]
    else:
        params = [make([0.0] * 4, "float32"), make([[0.0, 0.0], [0.0, 0.0]], "float64")]
    rets = [dist.broadcast(p, src=0) for p in params]
    return {"params": [state(p) for p in params], "returned": [returned(r) for r in rets]}


def broadcast_async(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    t = make([rank + 5, -rank], "int64")
    w = dist.broadcast(t, src=n - 1, async_op=True)
    out["future_value"] = [state(v) for v in w.get_future().wait()]
    out["wait"] = w.wait()
    out["completed"] = w.is_completed()
    out["tensor"] = state(t)
    works = []
    tensors = []
    for root in range(n):
        tensors.append(make([rank, root], "int32"))
        works.append(dist.broadcast(tensors[-1], src=root, async_op=True))
    out["waits"] = [w.wait() for w in reversed(works)]
    out["all_roots"] = [state(x) for x in tensors]
    return out


# -- barrier -----------------------------------------------------------------------------------

def barrier(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {"returned": returned(dist.barrier())}
    w = dist.barrier(async_op=True)
    out["wait"] = w.wait()
    out["completed"] = w.is_completed()
    out["future_value"] = plain(w.get_future().wait())
    # Barriers interleaved with other collectives keep their order.
    t = make([rank], "int64")
    dist.all_reduce(t)
    dist.barrier()
    dist.all_reduce(t)
    out["after"] = state(t)
    return out


# -- point-to-point ----------------------------------------------------------------------------

def docs_p2p_blocking(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The tutorial's "Blocking point-to-point communication": rank 0 sends to rank 1."""
    tensor = make([0.0], "float32")
    out = {}
    if rank == 0:
        tensor += 1
        out["send_returned"] = returned(dist.send(tensor=tensor, dst=1))
    elif rank == 1:
        out["recv_returned"] = dist.recv(tensor=tensor, src=0)
    out["data"] = state(tensor)
    return out


def docs_p2p_nonblocking(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The tutorial's "Non-blocking point-to-point communication": isend/irecv then wait."""
    tensor = make([0.0], "float32")
    out = {}
    req = None
    if rank == 0:
        tensor += 1
        req = dist.isend(tensor=tensor, dst=1)
    elif rank == 1:
        req = dist.irecv(tensor=tensor, src=0)
    if req is not None:
        out["wait"] = req.wait()
        out["completed"] = req.is_completed()
    out["data"] = state(tensor)
    return out


def p2p_ring_tags(dist: Any, rank: int, n: int, make: Make) -> dict:
    """A ring of isend/irecv; two messages per link, told apart by tag, received in reverse."""
    right, left = (rank + 1) % n, (rank - 1) % n
    a = make([rank, 100 + rank], "int64")
    b = make([[0.5 * rank, -rank], [1.0, 2.0]], "float64")
    ra = make([0, 0], "int64")
    rb = make([[0.0, 0.0], [0.0, 0.0]], "float64")
    reqs = [dist.irecv(rb, src=left, tag=2), dist.irecv(ra, src=left, tag=1),
            dist.isend(a, dst=right, tag=1), dist.isend(b, dst=right, tag=2)]
    waits = [r.wait() for r in reqs]
    return {"ra": state(ra), "rb": state(rb), "waits": waits,
            "completed": [r.is_completed() for r in reqs]}


def p2p_dtypes(dist: Any, rank: int, n: int, make: Make) -> dict:
    """send/recv of several element types and shapes, from rank 0 to the last rank."""
    cases = [("int8", [-1, 2, -3]), ("uint8", [[255, 0], [1, 2]]), ("int32", [7]),
             ("float16", [0.5, -1.5]), ("float64", [[1.25]]), ("complex64", [complex(1, -2)]),
             ("bool", [True, False, True])]
    out = {}
    last = n - 1
    for tag, (dtype, values) in enumerate(cases):
        if rank == 0:
            dist.send(make(values, dtype), dst=last, tag=tag)
        elif rank == last:
            t = make(_zeros_like(values), dtype)
            sender = dist.recv(t, src=0, tag=tag)
            out[dtype] = {"data": state(t), "sender": sender}
    return out


def _zeros_like(values: Any) -> Any:
    if isinstance(values, list):
        return [_zeros_like(v) for v in values]
    return type(values)(0)


def p2p_fifo_same_tag(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Messages with the same tag between the same pair arrive in the order they were sent."""
    out = {}
    if rank == 0:
        reqs = [dist.isend(make([i, -i], "int64"), dst=1, tag=3) for i in range(1, 5)]
        out["waits"] = [r.wait() for r in reqs]
    elif rank == 1:
        bufs = [make([0, 0], "int64") for _ in range(4)]
        reqs = [dist.irecv(b, src=0, tag=3) for b in bufs]
        out["waits"] = [r.wait() for r in reqs]
        out["received"] = [state(b) for b in bufs]
    return out


def recv_any_source(dist: Any, rank: int, n: int, make: Make) -> dict:
    """recv with src=None takes a message from any rank and returns the sender's rank."""
    out = {}
    if rank == 0:
        got = []
        for _ in range(n - 1):
            t = make([-1], "int64")
            sender = dist.recv(t)
            got.append([sender, t.tolist()[0]])
        out["got"] = sorted(got)
    else:
        dist.send(make([10 * rank + 1], "int64"), dst=0)
    # irecv from any source on the last rank, with a tag; Work.source_rank names the sender.
    last = n - 1
    if rank == last:
        got = []
        for _ in range(n - 1):
            t = make([-1, -1], "int32")
            w = dist.irecv(t, tag=7)
            w.wait()
            got.append([quietly(w.source_rank), plain(t.tolist())])
        out["irecv_got"] = sorted(got)
    else:
        dist.isend(make([rank, 2 * rank], "int32"), dst=last, tag=7).wait()
    return out


# -- groups ------------------------------------------------------------------------------------

def _group_view(dist: Any, group: Any, rank: int, members: list[int], probes: list[int]) -> dict:
    view = {"get_rank": dist.get_rank(group), "get_world_size": dist.get_world_size(group)}
    if rank in members:
        view["ranks"] = list(dist.get_process_group_ranks(group))
        view["group_rank_of"] = {str(g): dist.get_group_rank(group, g) for g in probes}
        view["global_rank_of"] = {str(i): dist.get_global_rank(group, i)
                                  for i in range(len(members))}
    return view


def new_group_pair(dist: Any, rank: int, n: int, make: Make) -> dict:
    """new_group([0, 1]): its members all_reduce while the others do nothing (and get None)."""
    g = dist.new_group([0, 1])
    out = {"view": _group_view(dist, g, rank, [0, 1], [0, 1])}
    t = make([rank + 1, 10 * rank], "int64")
    out["all_reduce_returned"] = returned(quietly(lambda: dist.all_reduce(t, group=g)))
    out["all_reduce"] = state(t)
    t = make([rank, -rank], "int64")
    out["broadcast_returned"] = returned(quietly(lambda: dist.broadcast(t, group=g, group_src=1)))
    out["broadcast"] = state(t)
    if rank in (0, 1):
        t = make([rank * 3 + 1], "int64")
        if rank == 1:
            dist.send(t, group=g, group_dst=0)
        else:
            out["recv_group_src"] = dist.recv(t, group=g, group_src=1)
        out["p2p"] = state(t)
    t = make([rank], "int64")
    dist.all_reduce(t)
    out["world_after"] = state(t)
    return out


def new_group_ends(dist: Any, rank: int, n: int, make: Make) -> dict:
    """new_group([n-1, 0]) (given unsorted): ranks are sorted, global ranks translate."""
    members = [n - 1, 0]
    g = dist.new_group(members)
    out = {"view": _group_view(dist, g, rank, sorted(members), [0, n - 1])}
    t = make([rank + 1, 5 - rank], "int64")
    out["bcast_returned"] = returned(quietly(lambda: dist.broadcast(t, src=n - 1, group=g)))
    out["bcast"] = state(t)
    t = make([rank + 1, 5 - rank], "int64")
    quietly(lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g))
    out["max"] = state(t)
    t = make([rank * 100], "int64")
    if rank == n - 1:
        dist.send(t, dst=0, group=g, tag=4)
    elif rank == 0:
        out["recv_returned"] = dist.recv(t, src=n - 1, group=g, tag=4)
    else:
        out["nonmember_recv"] = quietly(lambda: dist.recv(t, src=0, group=g))
        out["nonmember_isend"] = returned(quietly(lambda: dist.isend(t, dst=0, group=g)))
    out["p2p"] = state(t)
    return out


def new_group_many(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Singleton groups, a group of everyone, and group.WORLD; interleaved with the world."""
    singles = [dist.new_group([r]) for r in range(n)]
    everyone = dist.new_group()
    evens = dist.new_group(list(range(0, n, 2)))
    out = {}
    t = make([rank + 1, 2], "int64")
    dist.all_reduce(t, group=singles[rank])
    out["own_singleton"] = state(t)
    out["singleton_views"] = [_group_view(dist, g, rank, [r], [r]) for r, g in enumerate(singles)]
    t = make([rank + 1, 2], "int64")
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT, group=everyone)
    out["everyone"] = state(t)
    out["everyone_view"] = _group_view(dist, everyone, rank, list(range(n)), list(range(n)))
    t = make([rank + 1], "int64")
    quietly(lambda: dist.all_reduce(t, group=evens))
    out["evens"] = state(t)
    out["evens_view"] = _group_view(dist, evens, rank, list(range(0, n, 2)), list(range(0, n, 2)))
    out["world"] = {
        "get_world_size": dist.get_world_size(dist.group.WORLD),
        "get_rank": dist.get_rank(dist.GroupMember.WORLD),
        "ranks": list(dist.get_process_group_ranks(dist.group.WORLD)),
        "default_ranks": list(dist.get_process_group_ranks(None)),
        "get_rank_default": dist.get_rank(),
        "get_world_size_default": dist.get_world_size(),
    }
    t = make([rank], "int64")
    dist.all_reduce(t, group=dist.group.WORLD)
    out["world_all_reduce"] = state(t)
    return out


def pg_count(dist: Any, rank: int, n: int, make: Make) -> dict:
    """get_pg_count() as groups are made (one this rank is not in, one of everyone) and one is
    destroyed. torch counts every new_group call on every rank and never decrements (it
    resets only when the world is destroyed)."""
    counts = {"start": dist.get_pg_count()}
    dist.new_group([0])
    counts["after_new_group_of_rank0"] = dist.get_pg_count()
    everyone = joined_group(dist)
    counts["after_new_group_of_all"] = dist.get_pg_count()
    dist.destroy_process_group(everyone)
    counts["after_destroying_it"] = dist.get_pg_count()
    return counts


def work_methods(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The rest of Work's interface on completed collective and p2p works."""
    t = make([rank + 1, -rank], "int64")
    w = dist.all_reduce(t, async_op=True)
    out = {"wait_timeout": w.wait(timeout=timedelta(seconds=60)),
           "is_success": w.is_success(), "exception": returned(w.exception()),
           "synchronize": returned(w.synchronize()),
           "result": [state(x) for x in quietly(w.result)], "is_completed": w.is_completed()}
    if rank in (0, 1):
        t = make([rank + 10], "int64")
        w = dist.isend(t, dst=1) if rank == 0 else dist.irecv(t, src=0)
        out["p2p"] = {"wait": w.wait(), "is_success": w.is_success(),
                      "exception": returned(w.exception()), "data": state(t)}
    return out


# -- refused calls (both refuse before any byte moves; the group stays usable) -----------------

def refused_calls(dist: Any, rank: int, n: int, make: Make) -> dict:
    out = {}
    cases = [("float32", "BAND"), ("float64", "BXOR"), ("float16", "BOR"),
             ("complex64", "MAX"), ("complex64", "PRODUCT"), ("complex128", "MIN")]
    for dtype, op in cases:
        t = make(VALUES[dtype](rank, n), dtype)
        out[f"{dtype}-{op}"] = {
            "raised": raises(lambda: dist.all_reduce(t, op=getattr(dist.ReduceOp, op))),
            "unchanged": state(t)}
    t = make([rank], "int64")
    out["broadcast_src_out_of_range"] = {"raised": raises(lambda: dist.broadcast(t, src=n)),
                                         "unchanged": state(t)}
    t = make([rank], "int64")
    dist.all_reduce(t)
    out["group_still_works"] = state(t)
    return out


# -- accord only (gloo lacks these); checked against closed forms -------------------------------

def avg_integer(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Integer AVG (gloo raises): the sum divided by the size, truncated toward zero."""
    out = {}
    for dtype in ("int64", "int32", "int8"):
        values = [rank + 1, -(rank + 2), 3 * rank - 4, 7, -7 * rank]
        out[dtype] = state(_reduced(dist, make, values, dtype, dist.ReduceOp.AVG))
    out["uint8"] = state(_reduced(dist, make, [rank + 1, 2 * rank, 60 - rank], "uint8",
                                  dist.ReduceOp.AVG))
    return out


def premul_sum(dist: Any, rank: int, n: int, make: Make) -> dict:
    """PREMUL_SUM (NCCL only; gloo raises): factor × Σ inputs."""
    out = {}
    for dtype in ("float64", "float32", "float16"):
        op = dist._make_nccl_premul_sum(2.5)
        out[dtype] = state(_reduced(dist, make, [rank + 1.0, -(rank + 2.0), 0.5 * rank], dtype, op))
    factor = make([0.25], "float64")
    op = dist._make_nccl_premul_sum(factor)
    out["tensor_factor"] = state(_reduced(dist, make, [4.0 * rank, 1.0], "float64", op))
    return out


def _reduced(dist: Any, make: Make, values: list, dtype: str, op: Any) -> Any:
    t = make(values, dtype)
    dist.all_reduce(t, op=op)
    return t


def p2p_future(dist: Any, rank: int, n: int, make: Make) -> dict:
    """get_future on isend/irecv (gloo: "Work::getFuture not implemented")."""
    out = {}
    if rank == 0:
        w = dist.isend(make([rank + 41, 1], "int64"), dst=n - 1)
        w.get_future().wait()
        out["send_done"] = w.is_completed()
    elif rank == n - 1:
        t = make([0, 0], "int64")
        w = dist.irecv(t, src=0)
        w.get_future().wait()
        out["recv_done"] = w.is_completed()
        out["data"] = state(t)
    return out


def strided_views(dist: Any, rank: int, n: int, make: Make) -> dict:
    """all_reduce and broadcast into a strided view (``base[::2]``) touch only the view.

    Not compared with gloo: torch 2.13's gloo reads and writes ``numel`` contiguous elements
    from the view's first element instead (the view gets wrong values and elements of the base
    outside the view are overwritten), so the closed form is the reference.
    """
    out = {}
    base = make([10 * rank + i for i in range(8)], "int64")
    view = base[::2]
    dist.all_reduce(view)
    out["all_reduce_view"], out["all_reduce_base"] = state(view), state(base)
    base = make([10 * rank + i for i in range(8)], "float32")
    view = base[1::3]
    dist.broadcast(view, src=n - 1)
    out["broadcast_view"], out["broadcast_base"] = state(view), state(base)
    return out


def mismatched_counts(dist: Any, rank: int, n: int, make: Make) -> dict:
    """all_reduce with a different count on each rank must fail on every rank, not hang (gloo
    times out). A failed collective breaks its group, so this runs on a fresh group of every
    rank (breaking the default group would race with peers still finishing earlier scripts);
    the default group is still usable afterwards."""
    g = joined_group(dist)
    t = make(list(range(2 + rank)), "int64")
    try:
        dist.all_reduce(t, group=g)
    except Exception as exc:  # noqa: BLE001
        out = {"raised": type(exc).__name__, "is_dist_error": isinstance(exc, dist.DistError)}
    else:
        out = {"raised": None, "result": state(t)}
    dist.destroy_process_group(g)
    t = make([rank], "int64")
    dist.all_reduce(t)
    out["world_after"] = state(t)
    return out


# -- the registry ------------------------------------------------------------------------------

SCRIPTS: list[Script] = [
    Script("docs_all_reduce_int64", docs_all_reduce_int64),
    Script("docs_all_reduce_cfloat", docs_all_reduce_cfloat),
    Script("all_reduce_default_op", all_reduce_default_op),
    *[Script(f"all_reduce_ops_{dt}", op_sweep(dt, INT_OPS))
      for dt in ("int64", "int32", "int8", "uint8", "bool")],
    *[Script(f"all_reduce_ops_{dt}", op_sweep(dt, FLOAT_OPS))
      for dt in ("float64", "float32", "float16")],
    Script("all_reduce_ops_bfloat16", op_sweep("bfloat16", FLOAT_OPS), needs_torch=True),
    *[Script(f"all_reduce_ops_{dt}", op_sweep(dt, COMPLEX_OPS))
      for dt in ("complex64", "complex128")],
    Script("all_reduce_overflow_wraps", all_reduce_overflow_wraps),
    Script("all_reduce_shapes", all_reduce_shapes),
    Script("all_reduce_async", all_reduce_async),
    Script("large_buffers", large_buffers),
    Script("broadcast_every_root", broadcast_every_root),
    Script("broadcast_dtypes", broadcast_dtypes),
    Script("docs_broadcast_params", docs_broadcast_params),
    Script("broadcast_async", broadcast_async),
    Script("barrier", barrier),
    Script("docs_p2p_blocking", docs_p2p_blocking),
    Script("docs_p2p_nonblocking", docs_p2p_nonblocking),
    Script("p2p_ring_tags", p2p_ring_tags),
    Script("p2p_dtypes", p2p_dtypes),
    Script("p2p_fifo_same_tag", p2p_fifo_same_tag),
    Script("recv_any_source", recv_any_source),
    Script("new_group_pair", new_group_pair),
    Script("new_group_ends", new_group_ends),
    Script("new_group_many", new_group_many),
    Script("pg_count", pg_count),
    Script("work_methods", work_methods),
    Script("refused_calls", refused_calls),
    # accord only
    *[Script(f"all_reduce_ops_{dt}", op_sweep(dt, INT_OPS), on_gloo=False)
      for dt in ("int16", "uint16", "uint32", "uint64")],
    Script("avg_integer", avg_integer, on_gloo=False),
    Script("premul_sum", premul_sum, on_gloo=False),
    Script("p2p_future", p2p_future, on_gloo=False),
    Script("strided_views", strided_views, on_gloo=False),
    Script("mismatched_counts", mismatched_counts, on_gloo=False),
]

BY_NAME: dict[str, Script] = {s.name: s for s in SCRIPTS}
assert len(BY_NAME) == len(SCRIPTS), "script names must be unique"


def names_for(on_torch_gloo: bool, torch_tensors: bool) -> list[str]:
    """The scripts one implementation runs, in order."""
    return [s.name for s in SCRIPTS
            if (s.on_gloo or not on_torch_gloo) and (torch_tensors or not s.needs_torch)]


# -- buffer factories --------------------------------------------------------------------------

def numpy_factory() -> Make:
    import numpy as np

    def make(values: Any, dtype: str) -> Any:
        return np.array(values, dtype=dtype)

    return make


def torch_factory() -> Make:
    import torch

    def make(values: Any, dtype: str) -> Any:
        return torch.tensor(values, dtype=getattr(torch, dtype))

    return make
