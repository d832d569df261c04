"""The torch-compatible object collectives, and the policy that restricts their unpickling.

Owns: torch's signatures and defaults of broadcast_object_list, all_gather_object,
gather_object and scatter_object_list (global ranks; ``device`` accepted and ignored: the
objects travel from CPU memory; blocking; None on non-members, lists untouched there), their
rows of the pipeline (``pipeline.run`` takes every step), and ``set_object_policy``,
accord's own addition. Must not take a step of the pipeline itself, nor know how objects
are pickled or sent (``group.objects``).

.. warning::
    These functions use ``pickle``, which is insecure: crafted data can run arbitrary code
    while it is unpickled. Only exchange objects with ranks you trust, or restrict what may
    be unpickled with ``set_object_policy``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..group import objects
from ..group.pickling import ObjectPolicy
from ..world import NON_GROUP_MEMBER, current_world
from .common import resolve_group
from .pipeline import ROOT, Call, Rank, run

# The rows (see pipeline.Call): blocking, on accord's group only, no short path.
BROADCAST_OBJECT_LIST = Call(
    "broadcast_object_list",
    objects.broadcast_object_list,
    takes_async_op=False,
    detail=("object_list", ROOT),
    rank=Rank(1, "src", default=0),
)
ALL_GATHER_OBJECT = Call("all_gather_object", objects.all_gather_object, takes_async_op=False, detail=())
GATHER_OBJECT = Call(
    "gather_object",
    objects.gather_object,
    takes_async_op=False,
    detail=(None, None, ROOT),
    rank=Rank(2, "dst", default=0),
)
SCATTER_OBJECT_LIST = Call(
    "scatter_object_list",
    objects.scatter_object_list,
    takes_async_op=False,
    detail=(None, None, ROOT),
    rank=Rank(2, "src", default=0),
)


def broadcast_object_list(
    object_list: list[Any],
    src: int | None = None,
    group: Any = None,
    device: Any = None,
    group_src: int | None = None,
) -> None:
    """Every rank's ``object_list`` gets, in place, the objects of ``src``'s list (default:
    global rank 0); every rank passes a list of the same length. Unpickles (see the module
    warning)."""
    run(BROADCAST_OBJECT_LIST, group, False, object_list, src, group_src)


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    """``object_list`` (one slot per rank) gets every rank's ``obj``, in place, in one round.
    Unpickles (see the module warning)."""
    run(ALL_GATHER_OBJECT, group, False, object_list, obj)


def gather_object(
    obj: Any,
    object_gather_list: list[Any] | None = None,
    dst: int | None = None,
    group: Any = None,
    group_dst: int | None = None,
) -> None:
    """On ``dst`` (default: global rank 0), ``object_gather_list`` gets every rank's ``obj``;
    pass None on the other ranks. Unpickles (see the module warning)."""
    run(GATHER_OBJECT, group, False, obj, object_gather_list, dst, group_dst)


def scatter_object_list(
    scatter_object_output_list: list[Any],
    scatter_object_input_list: list[Any] | None = None,
    src: int | None = None,
    group: Any = None,
    group_src: int | None = None,
) -> None:
    """``scatter_object_output_list[0]`` on rank i gets ``scatter_object_input_list[i]`` of
    ``src`` (default: global rank 0). Unpickles (see the module warning)."""
    run(
        SCATTER_OBJECT_LIST,
        group,
        False,
        scatter_object_output_list,
        scatter_object_input_list,
        src,
        group_src,
    )


def set_object_policy(allowed: Iterable[str] | ObjectPolicy | None, group: Any = None) -> None:
    """Restrict what the object functions (``*_object*``, ``send/recv_object_list``) may
    unpickle on this rank: plain data (containers, numbers, strings, NumPy arrays, plain CPU
    tensors) plus ``allowed`` (exact names like ``"mypkg.Config"`` or package prefixes like
    ``"mypkg"``; see ``ObjectPolicy``). ``None`` lifts the restriction (torch's behaviour).
    Tensor subclasses (``nn.Parameter``) pickle through torch's own functions: allow them
    by name (e.g. ``"torch._utils._rebuild_parameter"``) if you send them.

    With ``group=None`` the policy applies to the default group and every group of this
    world, and groups created later start with it; with a group, to that group only. An
    object the policy refuses raises ``pickle.UnpicklingError`` on the receiving rank (the
    group stays usable). accord's addition: torch has no such control.
    """
    if allowed is None or isinstance(allowed, ObjectPolicy):
        policy = allowed
    else:
        policy = ObjectPolicy((allowed,) if isinstance(allowed, str) else tuple(allowed))
    world = current_world()
    assert world is not None
    if isinstance(group, int) and not isinstance(group, bool) and group == NON_GROUP_MEMBER:
        return
    if group is not None and group is not world.default_group:
        pg = resolve_group(group, "set_object_policy")
        if pg is not None:
            pg.object_policy = policy
        return
    for pg in [world.default_group, *world.groups]:
        if hasattr(pg, "object_policy"):
            pg.object_policy = policy
