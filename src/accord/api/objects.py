"""The torch-compatible object collectives, and the policy that restricts their unpickling.

Owns: torch's signatures and defaults of broadcast_object_list, all_gather_object,
gather_object and scatter_object_list (global ranks; ``device`` accepted and ignored: the
objects travel from CPU memory; blocking; None on non-members, lists untouched there), and
``set_object_policy``, accord's own addition.

.. warning::
    These functions use ``pickle``, which is insecure: crafted data can run arbitrary code
    while it is unpickled. Only exchange objects with ranks you trust, or restrict what may
    be unpickled with ``set_object_policy``.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..diagnostics import debug, detail
from ..group import objects
from ..group.pickling import ObjectPolicy
from ..world import NON_GROUP_MEMBER, current_world
from .common import group_rank, resolve_group


def broadcast_object_list(object_list: list[Any], src: int | None = None, group: Any = None,
                          device: Any = None, group_src: int | None = None) -> None:
    """Every rank's ``object_list`` gets, in place, the objects of ``src``'s list (default:
    global rank 0); every rank passes a list of the same length. Unpickles (see the module
    warning)."""
    pg = resolve_group(group, "broadcast_object_list")
    if pg is None:
        return
    try:
        root = group_rank(pg, 0 if src is None and group_src is None else src, group_src, "src")
        if debug.DETAIL_ON:
            detail.check(pg, "broadcast_object_list", root, {"object_list": _length(object_list)})
        objects.broadcast_object_list(pg, object_list, root)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    """``object_list`` (one slot per rank) gets every rank's ``obj``, in place, in one round.
    Unpickles (see the module warning)."""
    pg = resolve_group(group, "all_gather_object")
    if pg is None:
        return
    try:
        if debug.DETAIL_ON:
            detail.check(pg, "all_gather_object", None, {})
        objects.all_gather_object(pg, object_list, obj)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def gather_object(obj: Any, object_gather_list: list[Any] | None = None, dst: int | None = None,
                  group: Any = None, group_dst: int | None = None) -> None:
    """On ``dst`` (default: global rank 0), ``object_gather_list`` gets every rank's ``obj``;
    pass None on the other ranks. Unpickles (see the module warning)."""
    pg = resolve_group(group, "gather_object")
    if pg is None:
        return
    try:
        root = group_rank(pg, 0 if dst is None and group_dst is None else dst, group_dst, "dst")
        if debug.DETAIL_ON:
            detail.check(pg, "gather_object", root, {})
        objects.gather_object(pg, obj, object_gather_list, root)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def scatter_object_list(scatter_object_output_list: list[Any],
                        scatter_object_input_list: list[Any] | None = None,
                        src: int | None = None, group: Any = None,
                        group_src: int | None = None) -> None:
    """``scatter_object_output_list[0]`` on rank i gets ``scatter_object_input_list[i]`` of
    ``src`` (default: global rank 0). Unpickles (see the module warning)."""
    pg = resolve_group(group, "scatter_object_list")
    if pg is None:
        return
    try:
        root = group_rank(pg, 0 if src is None and group_src is None else src, group_src, "src")
        if debug.DETAIL_ON:
            detail.check(pg, "scatter_object_list", root, {})
        objects.scatter_object_list(pg, scatter_object_output_list, scatter_object_input_list, root)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


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


def _length(objects_: Any) -> Any:
    """What the DETAIL check compares of an object list: its length (the objects differ)."""
    return f"a list of {len(objects_)}" if isinstance(objects_, list) else type(objects_).__name__
