"""The documents' own examples (../shared/seeds/) as SPMD scripts, run unchanged on
torch.distributed (gloo) and on accord by test_docs_examples.py, which compares what every
rank ends up with (what the examples print).

Seeds: 000 (broadcast_object_list), 001 (broadcast), 002 (the six collectives, a blog post
at 4 ranks), 004 (ReduceOp) and 003, the reference page: its store examples, monitored_barrier,
the object-list lengths it allows, the uneven all_to_all, ReduceOp's members and the
profiling section. The reference page's all_reduce / all_gather / all_to_all / object
collective examples are in ``scripts`` and ``scripts_rooted_exchanges`` already.

Adapted only where an example cannot run as written: random inputs (``torch.randn``) become
fixed rank-dependent values, ``torch.empty`` becomes zeros (its contents are undefined), file
paths and ports are fresh per job, waits of 10-30 s become fractions of a second, and calls
that fail on purpose run on a new group with a short timeout so that the job goes on. An
example that fails as written on torch too (``send(…, rank=…)``) is kept: both must refuse
it alike. The dill example needs a package we do not install, and seed 001's model example
needs a model: its broadcast of parameters is kept with plain tensors.

Same contract as ``scripts``; this module must not import torch (a script that needs it
finds it in ``sys.modules``, where the torch implementations' children have it).
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import tempfile
import warnings
from datetime import timedelta
from typing import Any, Callable

from . import scripts
from .scripts import Make, Script, state

NEW_GROUP_TIMEOUT_S = 1.0


class ScriptName(str):
    """A script name; unpickling one (in a runner child) imports this module."""

    __slots__ = ()


class MyClass:
    """Seed 000's custom class (module level, so that every rank can unpickle it)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __getstate__(self) -> dict:
        return {"value": self.value}

    def __setstate__(self, data: dict) -> None:
        self.value = data["value"]


def describe(obj: Any) -> Any:
    """What printing an object shows, as plain data: a tensor or array as its state."""
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return state(obj)
    if isinstance(obj, list):
        return [describe(o) for o in obj]
    return repr(obj)


def outcome(fn: Callable[[], Any]) -> dict:
    """How a call ended: its exception's class names (MRO), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as exc:  # noqa: BLE001 — the class is the result
        return {"raised": [c.__name__ for c in type(exc).__mro__ if c not in (object, BaseException,
                                                                               Exception)],
                "message": str(exc).strip().splitlines()[0][:240] if str(exc).strip() else ""}
    return {"raised": None}


# -- seed 000: broadcast_object_list ---------------------------------------------------------

def seed000_tensor_and_string(dist: Any, rank: int, n: int, make: Make) -> dict:
    if dist.get_rank() == 0:
        objects = [make([1, 2, 3], "int64"), "hello"]
    else:
        objects = [None, None]
    dist.broadcast_object_list(objects, src=0)
    return {"objects": describe(objects)}


def seed000_tensors_and_lists(dist: Any, rank: int, n: int, make: Make) -> dict:
    if dist.get_rank() == 0:
        objects = [make([1, 2, 3], "int64"), "hello", [4, 5, 6]]
    else:
        objects = [None, None, None]
    dist.broadcast_object_list(objects, src=0)
    return {"rank": dist.get_rank(), "objects": describe(objects)}


def seed000_manual_pickle(dist: Any, rank: int, n: int, make: Make) -> dict:
    """As written, the broadcast list is a temporary: only rank 0 has ``data_to_send`` after
    the call (the example's print fails elsewhere). Both implementations alike."""
    if dist.get_rank() == 0:
        data_to_send = pickle.dumps(MyClass(10))
    else:
        data_to_send = None
    sent = [data_to_send]
    dist.broadcast_object_list(sent, src=0)
    out: dict = {"data_to_send_is_none": data_to_send is None,
                 "list_holds": pickle.loads(sent[0]).value}
    if data_to_send is not None:
        out["obj_value"] = pickle.loads(data_to_send).value
    return out


def seed000_conditional(dist: Any, rank: int, n: int, make: Make) -> dict:
    if dist.get_rank() == 0:
        objects = [make([1, 2, 3], "int64"), None]
    else:
        objects = [None, make([4, 5, 6], "int64")]
    dist.broadcast_object_list(objects, src=0)
    return {"rank": dist.get_rank(), "objects": describe(objects)}


def seed000_send_recv_rank_keyword(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The example calls send(…, rank=…) and recv(…, rank=…): not the API's keyword (dst,
    src), so both implementations raise TypeError before anything is sent."""
    if dist.get_rank() == 0:
        data_to_send = make([1, 2, 3], "int64")
        results = [outcome(lambda r=r: dist.send(data_to_send, rank=r))
                   for r in range(1, dist.get_world_size())]
        return {"send": results}
    data_to_receive = make([0], "int64")
    return {"recv": outcome(lambda: dist.recv(data_to_receive, rank=0)),
            "data": state(data_to_receive)}


# -- seed 001: broadcast ---------------------------------------------------------------------

def seed001_broadcast_parameters(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Rank 0's parameters reach every rank through broadcast_object_list, and through
    broadcast(tensor, src) (the syntax the post starts with)."""
    if dist.get_rank() == 0:
        params = [make([[1.0, 2.0], [3.0, 4.0]], "float32"), make([0.5, -1.0], "float32")]
    else:
        params = [make([[0.0, 0.0], [0.0, 0.0]], "float32"), make([0.0, 0.0], "float32")]
    dist.broadcast_object_list(params, src=0)
    tensors = [make([10.0 * rank, 1.0], "float64"), make([[rank, 2], [3, 4]], "int32")]
    for t in tensors:
        dist.broadcast(t, 0, group=None)
    return {"params": describe(params), "broadcast": [state(t) for t in tensors]}


# -- seed 002: the six collectives (a new group of everyone for each) -----------------------

def seed002_reduce(dist: Any, rank: int, n: int, make: Make) -> dict:
    group = dist.new_group(list(range(n)))
    tensor = make([1.0], "float32")
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM, group=group)
    return {"data": tensor.tolist()[0]}


def seed002_all_reduce(dist: Any, rank: int, n: int, make: Make) -> dict:
    group = dist.new_group(list(range(n)))
    tensor = make([1.0], "float32")
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return {"data": tensor.tolist()[0]}


def seed002_scatter(dist: Any, rank: int, n: int, make: Make) -> dict:
    group = dist.new_group(list(range(n)))
    tensor = make([0.0], "float32")
    if rank == 0:
        tensor_list = [make([i + 1], "float32") for i in range(n)]
        dist.scatter(tensor, scatter_list=tensor_list, src=0, group=group)
    else:
        dist.scatter(tensor, scatter_list=[], src=0, group=group)
    return {"data": tensor.tolist()[0]}


def seed002_gather(dist: Any, rank: int, n: int, make: Make) -> dict:
    group = dist.new_group(list(range(n)))
    tensor = make([rank], "float32")
    if rank == 0:
        tensor_list = [make([0.0], "float32") for _ in range(n)]
        dist.gather(tensor, gather_list=tensor_list, dst=0, group=group)
        return {"data": [state(t) for t in tensor_list]}
    dist.gather(tensor, gather_list=[], dst=0, group=group)
    return {}


def seed002_all_gather(dist: Any, rank: int, n: int, make: Make) -> dict:
    group = dist.new_group(list(range(n)))
    tensor = make([rank], "float32")
    tensor_list = [make([0.0], "float32") for _ in range(n)]
    dist.all_gather(tensor_list, tensor, group=group)
    return {"data": [state(t) for t in tensor_list]}


def seed002_broadcast(dist: Any, rank: int, n: int, make: Make) -> dict:
    group = dist.new_group(list(range(n)))
    tensor = make([rank], "float32") if rank == 0 else make([0.0], "float32")
    dist.broadcast(tensor, src=0, group=group)
    return {"data": state(tensor)}


# -- seed 004: ReduceOp ----------------------------------------------------------------------

def seed004_sum_min_bor(dist: Any, rank: int, n: int, make: Make) -> dict:
    """randn(4) * rank summed, randn(4) + rank's minimum (fixed values instead of randn),
    and the bitwise OR of [1, 3, 5, 7] (uint8, the same on every rank)."""
    base = [1.5, -2.0, 0.25, 3.0]
    tensor = make([v * rank for v in base], "float32")
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    low = make([v + rank for v in base], "float32")
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    bits = make([1, 3, 5, 7], "uint8")
    dist.all_reduce(bits, op=dist.ReduceOp.BOR)
    return {"sum": state(tensor), "global_min": low.tolist()[0], "bor": state(bits)}


def seed004_misuses(dist: Any, rank: int, n: int, make: Make) -> dict:
    """all_reduce(model.parameters(), …) (a generator, not a tensor) and a Python function as
    the op ("custom reduction function"): both refused, by both implementations alike."""
    params = (p for p in [make([1.0, 2.0], "float32"), make([3.0], "float32")])
    tensor = make([1.0], "float32")
    return {"parameters_generator": outcome(lambda: dist.all_reduce(params, op=dist.ReduceOp.SUM)),
            "function_op": outcome(lambda: dist.all_reduce(tensor, op=lambda a, b: a + b)),
            "tensor_after": state(tensor)}


# -- seed 003, the reference page -------------------------------------------------------------

def _new_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ref_store_examples(dist: Any, rank: int, n: int, make: Make) -> dict:
    """Every single-process store example of the page, on each rank (its own stores); the
    30 s and 10 s waits shortened to 0.2 s."""
    out: dict = {}
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
    store.set("first_key", "first_value")
    out["get"] = store.get("first_key").decode()
    store.add("counter", 1)
    store.add("counter", 6)
    out["add"] = store.get("counter").decode()
    store.set("key", "first_value")
    out["compare_set_returned"] = bytes(store.compare_set("key", "first_value", "second_value")).decode()
    out["compare_set"] = store.get("key").decode()
    out["wait_missing"] = outcome(lambda: store.wait(["bad_key"], timedelta(seconds=0.2)))
    out["set_without_value"] = outcome(lambda: store.set("first_key"))
    out["delete_key"] = [store.delete_key("first_key"), store.delete_key("bad_key")]
    store.set_timeout(timedelta(seconds=0.2))
    out["wait_after_set_timeout"] = outcome(lambda: store.wait(["bad_key"]))
    hash_store = dist.HashStore()
    hash_store.set("first_key", "first_value")
    out["hash_store"] = hash_store.get("first_key").decode()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "filestore")
        store1, store2 = dist.FileStore(path, 2), dist.FileStore(path, 2)
        store1.set("first_key", "first_value")
        out["file_store"] = store2.get("first_key").decode()
        del store1, store2
    return out


def ref_store_num_keys(dist: Any, rank: int, n: int, make: Make) -> dict:
    """'This should return 2': torch counts the key its TCPStore set when it started."""
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
    store.set("first_key", "first_value")
    return {"num_keys": store.num_keys()}


def ref_tcp_store_server_and_client(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The first example, across two processes: rank 0 runs the server, rank 1 the client."""
    port = [_new_port() if rank == 0 else None]
    dist.broadcast_object_list(port, src=0)
    out = {}
    if rank == 0:
        server_store = dist.TCPStore("127.0.0.1", port[0], 2, True, timedelta(seconds=30))
        server_store.set("first_key", "first_value")
        dist.barrier()  # the value is set
        dist.barrier()  # the client has read it
        del server_store
    elif rank == 1:
        client_store = dist.TCPStore("127.0.0.1", port[0], 2, False)
        dist.barrier()
        out["client_get"] = client_store.get("first_key").decode()
        dist.barrier()
        del client_store
    else:
        dist.barrier()
        dist.barrier()
    return out


#: torch: "Ranks 1, 2, 3 failed to pass monitoredBarrier"; accord: "ranks 1, 2, 3 (group ranks
#: 1, 2, 3) failed to pass monitored_barrier" (global ranks first)
MISSING = re.compile(r"[Rr]anks? ([\d, ]+?)(?: \(group ranks? [\d, ]+\))? failed to pass "
                     r"monitored_?[Bb]arrier")


def _monitored(dist: Any, group: Any, wait_all_ranks: bool, reporter: bool) -> dict:
    """How monitored_barrier ended; on the reporter (rank 0), the ranks it names."""
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=NEW_GROUP_TIMEOUT_S),
                               wait_all_ranks=wait_all_ranks)
    except Exception as exc:  # noqa: BLE001
        found = MISSING.search(str(exc)) if reporter else None
        return {"raised": [c.__name__ for c in type(exc).__mro__][:6],
                "names": [int(r) for r in found.group(1).split(",")] if found else None}
    return {"raised": None}


def ref_monitored_barrier(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The page's two examples: rank 1 does not call it; then only rank 0 calls it, with
    wait_all_ranks=True. Each on a new group with a 1 s timeout."""
    out = {}
    for key, callers, wait_all in (("without_rank1", [r for r in range(n) if r != 1], False),
                                   ("wait_all_ranks", [0], True)):
        group = scripts.joined_group(dist, timeout=timedelta(seconds=NEW_GROUP_TIMEOUT_S))
        out[key] = _monitored(dist, group, wait_all, rank == 0) if rank in callers else {"called": False}
        dist.destroy_process_group(group)
        dist.barrier()
    return out


def ref_object_lists_longer_than_the_group(dist: Any, rank: int, n: int, make: Make) -> dict:
    """all_gather_object and gather_object write the first world_size slots of a longer list
    and leave the rest."""
    out = ["untouched"] * (n + 2)
    dist.all_gather_object(out, {"rank": rank})
    gathered = ["untouched"] * (n + 1) if rank == 0 else None
    dist.gather_object(rank * 10, gathered, dst=0)
    return {"all_gather_object": [repr(o) for o in out],
            "gather_object": None if gathered is None else [repr(o) for o in gathered]}


def ref_all_to_all_uneven_lists(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The page's uneven all_to_all example with lists (4 ranks): gloo refuses it; accord
    gives the page's stated output."""
    if n != 4:
        return {}
    from .scripts_rooted_exchanges import DOCS_A2A_INPUT_SPLITS, DOCS_A2A_INPUTS, DOCS_A2A_OUTPUT_SPLITS

    data, splits = DOCS_A2A_INPUTS[rank], DOCS_A2A_INPUT_SPLITS[rank]
    starts = [sum(splits[:j]) for j in range(4)]
    inputs = [make(data[s:s + k], "int64") for s, k in zip(starts, splits)]
    output = [make([0] * k, "int64") for k in DOCS_A2A_OUTPUT_SPLITS[rank]]
    group = scripts.joined_group(dist, timeout=timedelta(seconds=NEW_GROUP_TIMEOUT_S))
    result = outcome(lambda: dist.all_to_all(output, inputs, group=group))
    dist.destroy_process_group(group)
    dist.barrier()
    return {"call": result, "output": [t.tolist() for t in output]}


def ref_reduce_op(dist: Any, rank: int, n: int, make: Make) -> dict:
    """ReduceOp's members, the deprecated reduce_op, and AVG on integers (NCCL only on torch:
    gloo refuses it; accord divides the exact sum, truncating toward zero)."""
    members = [m for m in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
               if hasattr(dist.ReduceOp, m)]
    t = make([rank + 1, -3], "int64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.all_reduce(t, op=dist.reduce_op.MAX)
    avg = make([2 * rank + 1, -rank - 1], "int64")
    return {"members": members, "reduce_op_max": state(t),
            "avg_int64": outcome(lambda: dist.all_reduce(avg, op=dist.ReduceOp.AVG)),
            "avg_result": state(avg)}


def ref_profiling(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The page's profiling section, with record_shapes=True: every collective and p2p call is
    an event named '<backend>:<op>' with its inputs' shapes and dtypes. gloo's names are
    'gloo:…', accord's 'accord:…': the names are compared without the prefix."""
    torch = sys.modules["torch"]
    peer = (rank + 1) % n
    with torch.profiler.profile(record_shapes=True) as prof:
        tensor = make([[float(i + rank) for i in range(10)] for _ in range(20)], "float32")
        dist.all_reduce(tensor)
        dist.broadcast(make([rank, 1], "int64"), src=0)
        dist.reduce(make([1.0, 2.0, 3.0], "float64"), dst=0)
        dist.all_gather([make([0, 0, 0], "int32") for _ in range(n)], make([rank] * 3, "int32"))
        dist.all_gather_into_tensor(make([0.0] * (2 * n), "float32"), make([rank, 1.0], "float32"))
        dist.gather(make([rank], "int64"), [make([0], "int64") for _ in range(n)] if rank == 0 else None,
                    dst=0)
        dist.scatter(make([0.0, 0.0], "float32"),
                     [make([i, i], "float32") for i in range(n)] if rank == 0 else None, src=0)
        dist.all_to_all([make([0], "int64") for _ in range(n)], [make([rank], "int64") for _ in range(n)])
        dist.all_to_all_single(make([0.0] * n, "float64"), make([float(rank)] * n, "float64"))
        dist.barrier()
        dist.all_reduce(make([rank, 2], "int32"), async_op=True).wait()
        work = dist.isend(make([1.0] * 4, "float32"), dst=peer)
        dist.recv(make([0.0] * 4, "float32"), src=(rank - 1) % n)
        work.wait()
        if rank == 0:
            for _ in range(n - 1):
                dist.recv(make([0.0] * 5, "float32"))
        else:
            dist.send(make([1.0] * 5, "float32"), dst=0)
    events = sorted([e.name.split(":", 1)[1], [list(s) for s in e.input_shapes], list(e.input_dtypes)]
                    for e in prof.events() if e.name.split(":", 1)[0] in ("gloo", "accord"))
    return {"events": events}


def ref_profiling_accord_only(dist: Any, rank: int, n: int, make: Make) -> dict:
    """What gloo records differently (its reduce_scatter is an all_reduce, its object
    collectives several tensor calls) or cannot take (NumPy arrays): accord's own events."""
    import numpy as np

    torch = sys.modules["torch"]
    with torch.profiler.profile(record_shapes=True) as prof:
        dist.reduce_scatter(make([0.0, 0.0], "float32"), [make([1.0, 2.0], "float32") for _ in range(n)])
        dist.all_gather_object([None] * n, {"rank": rank})
        dist.all_reduce(np.ones((2, 3), dtype=np.float64))
        dist.monitored_barrier()
    events = sorted([e.name, [list(s) for s in e.input_shapes], list(e.input_dtypes)]
                    for e in prof.events() if e.name.startswith("accord:"))
    return {"events": events}


def ref_multigpu_example(dist: Any, rank: int, n: int, make: Make) -> dict:
    """The page's multi-GPU example: every rank all-reduces a list of one-element tensors, one
    per GPU; "all 16 tensors on the two nodes will have the all-reduced value of 16". Adapted
    to CPU lists of 2 (each list element a device of its own: n × 2 of them), the init
    left to the runner. torch 2.13 has no all_reduce_multigpu: on torch the same reduction
    is done with its single-tensor all_reduce (the list summed, reduced, copied back)."""
    tensor_list = []
    for _dev_idx in range(2):
        tensor_list.append(make([1], "float32"))
    if hasattr(dist, "all_reduce_multigpu"):
        dist.all_reduce_multigpu(tensor_list)
    else:
        total = tensor_list[0] + tensor_list[1]
        dist.all_reduce(total)
        for tensor in tensor_list:
            tensor.copy_(total)
    return {"tensors": [float(t[0]) for t in tensor_list]}


SCRIPTS: list[Script] = [
    Script("docs_seed000_tensor_and_string", seed000_tensor_and_string),
    Script("docs_seed000_tensors_and_lists", seed000_tensors_and_lists),
    Script("docs_seed000_manual_pickle", seed000_manual_pickle),
    Script("docs_seed000_conditional", seed000_conditional),
    Script("docs_seed000_send_recv_rank_keyword", seed000_send_recv_rank_keyword),
    Script("docs_seed001_broadcast_parameters", seed001_broadcast_parameters),
    Script("docs_seed002_reduce", seed002_reduce),
    Script("docs_seed002_all_reduce", seed002_all_reduce),
    Script("docs_seed002_scatter", seed002_scatter),
    Script("docs_seed002_gather", seed002_gather),
    Script("docs_seed002_all_gather", seed002_all_gather),
    Script("docs_seed002_broadcast", seed002_broadcast),
    Script("docs_seed004_sum_min_bor", seed004_sum_min_bor),
    Script("docs_seed004_misuses", seed004_misuses),
    Script("docs_ref_store_examples", ref_store_examples),
    Script("docs_ref_store_num_keys", ref_store_num_keys),
    Script("docs_ref_tcp_store_server_and_client", ref_tcp_store_server_and_client),
    Script("docs_ref_monitored_barrier", ref_monitored_barrier),
    Script("docs_ref_object_lists_longer_than_the_group", ref_object_lists_longer_than_the_group),
    Script("docs_ref_all_to_all_uneven_lists", ref_all_to_all_uneven_lists),
    Script("docs_ref_reduce_op", ref_reduce_op),
    Script("docs_ref_multigpu_example", ref_multigpu_example),
    Script("docs_ref_profiling", ref_profiling, needs_torch=True),
    Script("docs_ref_profiling_accord_only", ref_profiling_accord_only, on_gloo=False, needs_torch=True),
]
BY_NAME = {s.name: s for s in SCRIPTS}
assert len(BY_NAME) == len(SCRIPTS), "script names must be unique"
assert not BY_NAME.keys() & {s.name for s in scripts.SCRIPTS}, "names clash with scripts.py"
scripts.BY_NAME.update(BY_NAME)  # the runner's children look names up there


def names_for(on_torch_gloo: bool, torch_tensors: bool) -> list[str]:
    """The scripts one implementation runs, in order, as ScriptName."""
    return [ScriptName(s.name) for s in SCRIPTS
            if (s.on_gloo or not on_torch_gloo) and (torch_tensors or not s.needs_torch)]
