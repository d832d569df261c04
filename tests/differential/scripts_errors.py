"""The survey of bad calls: each script makes one wrong call, on every rank, and reports the
class of the exception it raised (or that it did not raise).

Run on torch.distributed (gloo) and on accord by test_error_survey.py, which requires, case
by case, that accord's exception is caught by the ``except`` clause that catches torch's:
``isinstance(accord_exc, type(torch_exc))``, compared by the names in accord's MRO (torch's
``DistBackendError`` and friends have accord namesakes).

The calls are wrong on the calling rank itself (a wrong op for the dtype, a list of the wrong
length, an out-of-range rank …), so both implementations raise before anything is sent; no
case needs the other ranks to disagree. Where a rooted call is wrong only on the root (or
only elsewhere), the other ranks get a wrong argument of their own in the same case, so that
no rank waits in a collective for a rank that raised: such cases record each rank's class.

Same contract as ``scripts``: ``fn(dist, rank, world_size, make) -> dict`` of plain data, and
this module must not import torch. The cases are written for world size 2 (rank 0 is the
root of rooted calls).
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any, Callable

from . import scripts
from .scripts import Make, Script

CaseFn = Callable[[Any, int, int, Make], Any]


class ScriptName(str):
    """A script name; unpickling one (in a runner child) imports this module."""

    __slots__ = ()


def exception_classes(exc: BaseException) -> list[str]:
    """The names of ``exc``'s class and its bases (MRO order), without object/BaseException."""
    return [c.__name__ for c in type(exc).__mro__ if c not in (object, BaseException, Exception)]


def probe(case: CaseFn) -> Callable[[Any, int, int, Make], dict]:
    def fn(dist: Any, rank: int, n: int, make: Make) -> dict:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                case(dist, rank, n, make)
        except Exception as exc:  # noqa: BLE001 — the class is the result
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return {"raised": exception_classes(exc), "message": first[:240]}
        return {"raised": None}
    return fn


# -- helpers ---------------------------------------------------------------------------------

def ones(make: Make, count: int, dtype: str = "float32") -> Any:
    return make([1] * count if dtype != "bool" else [True] * count, dtype)


def tensors(make: Make, k: int, count: int = 2, dtype: str = "float32") -> list[Any]:
    return [ones(make, count, dtype) for _ in range(k)]


def op_on(dtype: str, op: str, call: str = "all_reduce") -> CaseFn:
    def case(dist: Any, rank: int, n: int, make: Make) -> None:
        t = ones(make, 3, dtype)
        reduce_op = getattr(dist.ReduceOp, op)
        if call == "all_reduce":
            dist.all_reduce(t, op=reduce_op)
        elif call == "reduce":
            dist.reduce(t, dst=0, op=reduce_op)
        elif call == "reduce_scatter":
            dist.reduce_scatter(ones(make, 3, dtype), [ones(make, 3, dtype) for _ in range(n)], op=reduce_op)
        else:
            dist.reduce_scatter_tensor(ones(make, 3, dtype), ones(make, 3 * n, dtype), op=reduce_op)
    return case


# -- the cases -------------------------------------------------------------------------------

def _rooted_list_cases() -> dict[str, CaseFn]:
    """gather/scatter (rank 0 is the root): the root's list is wrong, and rank 1 passes a list
    it must not pass."""
    def gather_short(dist, rank, n, make):
        dist.gather(ones(make, 2), tensors(make, n - 1 if rank == 0 else n), dst=0)

    def gather_long(dist, rank, n, make):
        dist.gather(ones(make, 2), tensors(make, n + 1), dst=0)

    def gather_missing(dist, rank, n, make):
        dist.gather(ones(make, 2), None if rank == 0 else tensors(make, n), dst=0)

    def gather_wrong_size(dist, rank, n, make):
        dist.gather(ones(make, 2), tensors(make, n, 3), dst=0)

    def gather_wrong_dtype(dist, rank, n, make):
        dist.gather(ones(make, 2), tensors(make, n, 2, "int64"), dst=0)

    def scatter_short(dist, rank, n, make):
        dist.scatter(ones(make, 2), tensors(make, n - 1 if rank == 0 else n), src=0)

    def scatter_long(dist, rank, n, make):
        dist.scatter(ones(make, 2), tensors(make, n + 1), src=0)

    def scatter_missing(dist, rank, n, make):
        dist.scatter(ones(make, 2), None if rank == 0 else tensors(make, n), src=0)

    def scatter_wrong_size(dist, rank, n, make):
        dist.scatter(ones(make, 2), tensors(make, n, 3), src=0)

    def scatter_wrong_dtype(dist, rank, n, make):
        dist.scatter(ones(make, 2), tensors(make, n, 2, "int64"), src=0)

    return {"gather_list_short": gather_short, "gather_list_long": gather_long,
            "gather_list_missing_on_root": gather_missing, "gather_list_wrong_size": gather_wrong_size,
            "gather_list_wrong_dtype": gather_wrong_dtype, "scatter_list_short": scatter_short,
            "scatter_list_long": scatter_long, "scatter_list_missing_on_root": scatter_missing,
            "scatter_list_wrong_size": scatter_wrong_size, "scatter_list_wrong_dtype": scatter_wrong_dtype}


def _list_cases() -> dict[str, CaseFn]:
    return {
        "all_gather_list_short": lambda d, r, n, m: d.all_gather(tensors(m, n - 1), ones(m, 2)),
        "all_gather_list_long": lambda d, r, n, m: d.all_gather(tensors(m, n + 1), ones(m, 2)),
        "all_gather_list_wrong_size": lambda d, r, n, m: d.all_gather(tensors(m, n, 3), ones(m, 2)),
        "all_gather_list_wrong_dtype": lambda d, r, n, m: d.all_gather(tensors(m, n, 2, "int64"), ones(m, 2)),
        "all_gather_not_a_list": lambda d, r, n, m: d.all_gather(ones(m, 2 * n), ones(m, 2)),
        "reduce_scatter_list_short": lambda d, r, n, m: d.reduce_scatter(ones(m, 2), tensors(m, n - 1)),
        "reduce_scatter_list_long": lambda d, r, n, m: d.reduce_scatter(ones(m, 2), tensors(m, n + 1)),
        "reduce_scatter_list_wrong_size": lambda d, r, n, m: d.reduce_scatter(ones(m, 2), tensors(m, n, 3)),
        "reduce_scatter_list_wrong_dtype": lambda d, r, n, m: d.reduce_scatter(ones(m, 2),
                                                                               tensors(m, n, 2, "int64")),
        "all_to_all_outputs_short": lambda d, r, n, m: d.all_to_all(tensors(m, n - 1), tensors(m, n)),
        "all_to_all_inputs_short": lambda d, r, n, m: d.all_to_all(tensors(m, n), tensors(m, n - 1)),
        "all_to_all_inputs_long": lambda d, r, n, m: d.all_to_all(tensors(m, n), tensors(m, n + 1)),
        "all_to_all_wrong_dtype": lambda d, r, n, m: d.all_to_all(tensors(m, n), tensors(m, n, 2, "int64")),
        "all_gather_into_tensor_wrong_size": lambda d, r, n, m: d.all_gather_into_tensor(
            ones(m, 2 * n + 1), ones(m, 2)),
        "all_gather_into_tensor_wrong_dtype": lambda d, r, n, m: d.all_gather_into_tensor(
            ones(m, 2 * n, "int64"), ones(m, 2)),
        "reduce_scatter_tensor_wrong_size": lambda d, r, n, m: d.reduce_scatter_tensor(
            ones(m, 2), ones(m, 2 * n + 1)),
        "reduce_scatter_tensor_wrong_dtype": lambda d, r, n, m: d.reduce_scatter_tensor(
            ones(m, 2), ones(m, 2 * n, "int64")),
        "all_to_all_single_uneven_without_splits": lambda d, r, n, m: d.all_to_all_single(
            ones(m, 2 * n + 1), ones(m, 2 * n + 1)),
        "all_to_all_single_splits_wrong_length": lambda d, r, n, m: d.all_to_all_single(
            ones(m, 2 * n), ones(m, 2 * n), [2] * (n + 1), [2] * (n + 1)),
        "all_to_all_single_splits_wrong_sum": lambda d, r, n, m: d.all_to_all_single(
            ones(m, 2 * n), ones(m, 2 * n), [3] * n, [3] * n),
        "all_to_all_single_wrong_dtype": lambda d, r, n, m: d.all_to_all_single(
            ones(m, 2 * n), ones(m, 2 * n, "int64")),
    }


def in_new_group(case: Callable[[Any, int, int, Make, Any], Any]) -> CaseFn:
    """Run ``case`` on a new group of every rank with a short timeout, for a call that is
    wrong on the root only: the other ranks may then wait for the root in that group (they
    time out), or complete while the root refused (its message is never received); the group
    is destroyed afterwards either way, and a barrier on the default group waits for the
    ranks still waiting, so that the next case starts clean."""
    def run(dist: Any, rank: int, n: int, make: Make) -> None:
        group = scripts.joined_group(dist, timeout=timedelta(seconds=NEW_GROUP_TIMEOUT_S))
        try:
            case(dist, rank, n, make, group)
        finally:
            dist.destroy_process_group(group)
            dist.barrier()  # the next case starts when every rank is done with this one
    return run


NEW_GROUP_TIMEOUT_S = 1.0


def _object_cases() -> dict[str, CaseFn]:
    def scatter_object_input_missing(dist, rank, n, make):
        # the root passes no input list; the other ranks an empty output list
        dist.scatter_object_list([None] if rank == 0 else [], None, src=0)

    def gather_object_missing(dist, rank, n, make):
        dist.gather_object("x", None if rank == 0 else [None] * n, dst=0)

    # wrong on the root only
    def gather_object_short(dist, rank, n, make, group):
        dist.gather_object("x", [None] * (n - 1) if rank == 0 else None, dst=0, group=group)

    def scatter_object_input_short(dist, rank, n, make, group):
        dist.scatter_object_list([None], ["x"] * (n - 1) if rank == 0 else None, src=0, group=group)

    def scatter_object_input_long(dist, rank, n, make, group):
        dist.scatter_object_list([None], ["x"] * (n + 1) if rank == 0 else None, src=0, group=group)

    return {
        "all_gather_object_list_short": lambda d, r, n, m: d.all_gather_object([None] * (n - 1), r),
        "gather_object_list_short": in_new_group(gather_object_short),
        "gather_object_list_missing_on_root": gather_object_missing,
        "scatter_object_output_empty": lambda d, r, n, m: d.scatter_object_list([], ["x"] * n, src=0),
        "scatter_object_input_short": in_new_group(scatter_object_input_short),
        "scatter_object_input_long": in_new_group(scatter_object_input_long),
        "scatter_object_input_missing": scatter_object_input_missing,
        "broadcast_object_list_src_out_of_range": lambda d, r, n, m: d.broadcast_object_list([1], src=n),
        "gather_object_dst_out_of_range": lambda d, r, n, m: d.gather_object("x", [None] * n, dst=n),
        "send_object_list_to_self": lambda d, r, n, m: d.send_object_list([1], dst=r),
        "recv_object_list_from_self": lambda d, r, n, m: d.recv_object_list([None], src=r),
    }


def _rank_cases() -> dict[str, CaseFn]:
    return {
        "broadcast_src_out_of_range": lambda d, r, n, m: d.broadcast(ones(m, 2), src=n),
        "broadcast_src_negative": lambda d, r, n, m: d.broadcast(ones(m, 2), src=-1),
        "broadcast_src_not_an_int": lambda d, r, n, m: d.broadcast(ones(m, 2), src="0"),
        "broadcast_group_src_out_of_range": lambda d, r, n, m: d.broadcast(ones(m, 2), group_src=n),
        "broadcast_src_and_group_src": lambda d, r, n, m: d.broadcast(ones(m, 2), src=0, group_src=0),
        "broadcast_no_src": lambda d, r, n, m: d.broadcast(ones(m, 2)),
        "reduce_dst_out_of_range": lambda d, r, n, m: d.reduce(ones(m, 2), dst=n),
        "gather_dst_out_of_range": lambda d, r, n, m: d.gather(ones(m, 2), None, dst=n),
        "scatter_src_out_of_range": lambda d, r, n, m: d.scatter(ones(m, 2), None, src=n),
        "send_dst_out_of_range": lambda d, r, n, m: d.send(ones(m, 2), dst=n),
        "recv_src_out_of_range": lambda d, r, n, m: d.recv(ones(m, 2), src=n),
        "isend_dst_out_of_range": lambda d, r, n, m: d.isend(ones(m, 2), dst=n),
        "send_to_self": lambda d, r, n, m: d.send(ones(m, 2), dst=r),
        "recv_from_self": lambda d, r, n, m: d.recv(ones(m, 2), src=r),
        "isend_to_self": lambda d, r, n, m: d.isend(ones(m, 2), dst=r),
        "irecv_from_self": lambda d, r, n, m: d.irecv(ones(m, 2), src=r),
        "p2pop_with_send_not_isend": lambda d, r, n, m: d.P2POp(d.send, ones(m, 2), (r + 1) % n),
        "batch_isend_irecv_empty": lambda d, r, n, m: d.batch_isend_irecv([]),
        "batch_isend_irecv_not_p2pops": lambda d, r, n, m: d.batch_isend_irecv([ones(m, 2)]),
        "send_tensor_not_a_tensor": lambda d, r, n, m: d.send([1.0, 2.0], dst=(r + 1) % n),
    }


def _group_cases() -> dict[str, CaseFn]:
    def broadcast_src_not_in_group(dist, rank, n, make):
        group = dist.new_group([0])
        dist.broadcast(ones(make, 2), src=n - 1, group=group)  # rank 0: src is not a member

    def destroyed_group(dist, rank, n, make):
        group = scripts.joined_group(dist)
        dist.destroy_process_group(group)
        dist.all_reduce(ones(make, 2), group=group)

    def group_rank_of_non_member(dist, rank, n, make):
        dist.get_group_rank(dist.new_group([0]), n - 1)

    def global_rank_out_of_range(dist, rank, n, make):
        dist.get_global_rank(dist.new_group(list(range(n))), n)

    return {
        "new_group_rank_out_of_range": lambda d, r, n, m: d.new_group([0, n]),
        "all_reduce_group_a_string": lambda d, r, n, m: d.all_reduce(ones(m, 2), group="world"),
        "broadcast_src_not_in_group": broadcast_src_not_in_group,
        "destroyed_group": destroyed_group,
        "get_group_rank_of_non_member": group_rank_of_non_member,
        "get_global_rank_out_of_range": global_rank_out_of_range,
        "barrier_timeout_not_a_timedelta": lambda d, r, n, m: d.barrier(timeout="1s"),
        "monitored_barrier_timeout_not_a_timedelta": lambda d, r, n, m: d.monitored_barrier(timeout="1s"),
        "new_group_timeout_not_a_timedelta": lambda d, r, n, m: d.new_group(timeout="1s"),
        "work_wait_timeout_not_a_timedelta": lambda d, r, n, m: d.all_reduce(
            ones(m, 2), async_op=True).wait(timeout="1s"),
    }


def _op_cases() -> dict[str, CaseFn]:
    cases: dict[str, CaseFn] = {}
    for dtype, op in [("float32", "BAND"), ("float32", "BOR"), ("float32", "BXOR"), ("float64", "BAND"),
                      ("float16", "BXOR"), ("complex64", "MAX"), ("complex64", "MIN"),
                      ("complex64", "PRODUCT"), ("complex64", "BAND")]:
        cases[f"all_reduce_{op}_{dtype}"] = op_on(dtype, op)
    cases["reduce_BAND_float32"] = op_on("float32", "BAND", "reduce")
    cases["reduce_scatter_BOR_float32"] = op_on("float32", "BOR", "reduce_scatter")
    cases["reduce_scatter_tensor_BXOR_float64"] = op_on("float64", "BXOR", "reduce_scatter_tensor")
    cases["all_reduce_op_a_string"] = lambda d, r, n, m: d.all_reduce(ones(m, 2), op="sum")
    cases["all_reduce_premul_sum_without_factor"] = lambda d, r, n, m: d.all_reduce(
        ones(m, 2), op=d.ReduceOp.PREMUL_SUM)
    cases["all_reduce_tensor_a_list"] = lambda d, r, n, m: d.all_reduce([1.0, 2.0])
    cases["broadcast_tensor_none"] = lambda d, r, n, m: d.broadcast(None, src=0)
    return cases


def _all_cases() -> dict[str, CaseFn]:
    cases: dict[str, CaseFn] = {}
    for group in (_op_cases(), _list_cases(), _rooted_list_cases(), _object_cases(),
                  _rank_cases(), _group_cases()):
        assert not cases.keys() & group.keys()
        cases.update(group)
    return cases


CASES: dict[str, CaseFn] = _all_cases()
#: Cases that torch 2.13 (gloo) cannot survive: run on accord only (test_error_survey.py says
#: what accord raises instead).
TORCH_DIES: dict[str, str] = {
    "send_dst_out_of_range": "the process dies (SIGSEGV)",
    "isend_dst_out_of_range": "the process dies (SIGSEGV)",
    "recv_src_out_of_range": "the receive waits until the store times out (the group's "
                             "timeout), then DistStoreError",
}
PREFIX = "err_"
SCRIPTS: list[Script] = [Script(PREFIX + name, probe(fn), on_gloo=name not in TORCH_DIES)
                         for name, fn in CASES.items()]
BY_NAME = {s.name: s for s in SCRIPTS}
assert not BY_NAME.keys() & {s.name for s in scripts.SCRIPTS}, "names clash with scripts.py"
scripts.BY_NAME.update(BY_NAME)  # the runner's children look names up there


def names(on_torch_gloo: bool) -> list[str]:
    """The cases' script names for one implementation, as ScriptName (see scripts_rooted_exchanges's
    docstring)."""
    return [ScriptName(s.name) for s in SCRIPTS if s.on_gloo or not on_torch_gloo]


# -- calls made before init_process_group (run in the test process itself) -----------------

UNINITIALIZED: dict[str, Callable[[Any, Any], Any]] = {
    "get_rank": lambda d, t: d.get_rank(),
    "get_world_size": lambda d, t: d.get_world_size(),
    "all_reduce": lambda d, t: d.all_reduce(t),
    "broadcast": lambda d, t: d.broadcast(t, src=0),
    "barrier": lambda d, t: d.barrier(),
    "send": lambda d, t: d.send(t, dst=1),
    "new_group": lambda d, t: d.new_group([0]),
    "all_gather_object": lambda d, t: d.all_gather_object([None], 1),
    "destroy_process_group": lambda d, t: d.destroy_process_group(),
    "get_backend": lambda d, t: d.get_backend(),
    "monitored_barrier": lambda d, t: d.monitored_barrier(timeout=timedelta(seconds=1)),
}
