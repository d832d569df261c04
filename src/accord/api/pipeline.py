"""One call of the functional API, start to finish: the steps every entry point takes, once.

Owns: ``Call``, one operation's row (what each step runs for it), and ``run``, the steps in
order: the group (``resolve_group``: a non-member gets the row's ``non_member``, as torch's
functions return it), the ranks in the group (``Rank``: torch's ``src``/``group_src`` pair
becomes one group rank), the device group that carries a tensor of another device (torch's
NCCL, for a CUDA tensor), the DETAIL check (``diagnostics.detail``), the short path of a
blocking call, the general path, and counting a call this rank left by an exception
(``ProcessGroup.calls_raised``; the ``try`` costs nothing when nothing is raised). The rows
live beside the functions that use them (``collectives``, ``objects``, ``p2p``); the torch
backend runs the same rows on its group. The dispatch is ``run``'s one frame (and
``Rank.translate``'s, for a root or a peer) over what it runs: a step that does not apply
costs an attribute test. Must not know torch's signatures, which those modules own, nor how
a step works inside (group, diagnostics).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from .. import world as _worlds
from ..diagnostics import debug, detail
from ..group.process_group import ProcessGroup
from ..world import current_world
from .common import check_not_self, device_group, group_rank, resolve_group

_scoped_get = _worlds.scoped_world.get

#: The async calls made inside ``_coalescing_manager`` blocks of this thread, per group: {group:
#: [Work]} (``api.coalesced``); None outside them (``run`` looks only when a call is async).
collecting: contextvars.ContextVar[dict[Any, list[Any]] | None] = contextvars.ContextVar(
    "accord_coalescing", default=None
)

#: In a row's ``detail`` names: the argument that is the call's root (compared as the root).
ROOT = detail.ROOT
#: A ``Rank``'s default: a rank is required / None means any rank (a receive from anyone).
REQUIRED, ANY = "required", "any"


class Rank:
    """Where a call's root or peer sits among its arguments, as torch's functions take it: a
    global rank (``src``) and, right after it, a rank in the group (``group_src``). ``run``
    puts the group rank in their place, ``default`` when both are None (a global rank,
    ``REQUIRED`` or ``ANY``); ``not_self``: the rank may not be this rank's own."""

    __slots__ = ("at", "what", "default", "not_self")

    def __init__(self, at: int, what: str, default: int | str = REQUIRED, not_self: bool = False) -> None:
        self.at, self.what, self.default, self.not_self = at, what, default, not_self

    def translate(self, pg: ProcessGroup, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with the pair at ``at`` replaced by the group rank it names."""
        at = self.at
        rank, local = args[at], args[at + 1]
        if local is None and type(rank) is int and not self.not_self:
            found = pg.group_ranks.get(rank)  # the commonest call: a member's global rank
            rank = found if found is not None else self.group_rank(pg, rank, None)  # (says why not)
        else:
            rank = self.group_rank(pg, rank, local)
        # the pair replaced: the shapes of torch's functions written out (slicing costs more)
        if len(args) == 3 and at == 1:
            return (args[0], rank)
        if len(args) == 4:
            return (args[0], rank, args[3]) if at == 1 else (args[0], args[1], rank)
        return (*args[:at], rank, *args[at + 2 :])

    def group_rank(self, pg: ProcessGroup, rank: int | None, local: int | None) -> int | None:
        """The group rank a pair names, checked (``translate``'s careful way)."""
        if rank is None and local is None and self.default != REQUIRED:
            if self.default == ANY:
                return None
            rank = self.default  # type: ignore[assignment]
        found = group_rank(pg, rank, local, self.what)
        if self.not_self:
            check_not_self(pg, found, self.what)
        return found


class Call:
    """One operation's row: what each step of ``run`` runs for it.

    ``general(group, *args, async_op)`` (without ``async_op`` when ``takes_async_op`` is
    False: the object and point-to-point functions have none) runs it on accord's group;
    ``short(group, args)``, when given, tries a blocking call's short path first (False:
    not here, take the general path; it takes ``args`` as one tuple: splatting them again
    costs about 80 ns, a third of this layer's time on a small call);
    ``device(device_group, group, args, async_op)``, when given, runs it on the device
    group that claims ``args[carrier]`` (a tensor, or a list: its first); ``detail`` names
    ``args`` for the DETAIL check (``ROOT``: the root; None: not compared), or is None: no
    check; ``rank``: where torch's rank pair sits in the arguments the public function
    passes; ``non_member``: what a rank outside the group gets.
    """

    __slots__ = (
        "name",
        "general",
        "short",
        "device",
        "carrier",
        "detail",
        "rank",
        "takes_async_op",
        "non_member",
    )

    def __init__(
        self,
        name: str,
        general: Callable[..., Any],
        *,
        short: Callable[..., bool] | None = None,
        device: Callable[..., Any] | None = None,
        carrier: int = 0,
        detail: tuple[str | None, ...] | None = None,
        rank: Rank | None = None,
        takes_async_op: bool = True,
        non_member: Any = None,
    ) -> None:
        self.name, self.general, self.short, self.device, self.carrier = name, general, short, device, carrier
        self.detail, self.rank, self.takes_async_op, self.non_member = (
            detail,
            rank,
            takes_async_op,
            non_member,
        )

    def __repr__(self) -> str:
        return f"Call({self.name!r})"


def on_device(method: str) -> Callable[..., Any]:
    """The device step of a collective: the device group's method of the same name and
    arguments (the device groups take accord's, async_op last)."""

    def device(dg: Any, pg: ProcessGroup, args: tuple[Any, ...], async_op: bool) -> Any:
        return getattr(dg, method)(*args, async_op)

    device.__name__ = f"on_device_{method}"
    return device


def run(call: Call, group: Any, async_op: bool, *args: Any) -> Any:
    """Run ``call`` with ``args`` (torch's rank pair still in them, see ``Rank``) on ``group``
    — every step, in order.

    ``group`` None is the default group (an error when there is none); a ProcessGroup is
    itself, needing no default group (as torch's collectives: a destroyed group says so
    itself); anything else is ``resolve_group``'s (NON_GROUP_MEMBER: ``non_member``).
    """
    if group is None:  # (resolve_group's commonest case, written out: every call)
        world = _scoped_get() or _worlds.process_world  # (current_world, written out)
        if world is None:
            world = current_world()  # (raises: not initialized)
            assert world is not None
        pg = world.default_group
    elif isinstance(group, ProcessGroup):
        pg = group
    else:
        pg = resolve_group(group, call.name, 4)  # (warns at the line that called the API)
        if pg is None:
            return call.non_member
    try:
        rank = call.rank
        if rank is not None:  # (translate's commonest cases, written out: a member's global
            at = rank.at  # rank, as broadcast's and scatter's src, reduce's and gather's dst)
            if at == 1:
                if (
                    args[2] is None
                    and type(args[1]) is int
                    and not rank.not_self
                    and (found := pg.group_ranks.get(args[1])) is not None
                ):
                    args = (args[0], found) if len(args) == 3 else (args[0], found, *args[3:])
                else:
                    args = rank.translate(pg, args)  # (it says why, or takes the group rank)
            elif (
                at == 2
                and len(args) == 4
                and args[3] is None
                and type(args[2]) is int
                and not rank.not_self
                and (found := pg.group_ranks.get(args[2])) is not None
            ):
                args = (args[0], args[1], found)
            else:
                args = rank.translate(pg, args)
        if pg.device_groups and call.device is not None:  # one attribute read on CPU-only worlds
            dg = device_group(pg, args[call.carrier])
            if dg is not None:
                return _collected(pg, call.device(dg, pg, args, async_op))
        if debug.DETAIL_ON and call.detail is not None:
            return _collected(pg, _checked(pg, call, async_op, args))
        if not async_op and call.short is not None and call.short(pg, args):  # no hop: done
            return None
        if call.takes_async_op:
            if async_op:
                return _collected(pg, call.general(pg, *args, True))
            return call.general(pg, *args, False)
        return call.general(pg, *args)
    except BaseException:  # (see ProcessGroup.calls_raised)
        pg.calls_raised += 1
        raise


def _collected(pg: ProcessGroup, work: Any) -> Any:
    """An async call's Work, noted for the ``_coalescing_manager`` block on its group."""
    blocks = collecting.get()
    if blocks is not None and work is not None:
        works = blocks.get(pg)
        if works is not None:
            works.append(work)
    return work


def _checked(pg: ProcessGroup, call: Call, async_op: bool, args: tuple[Any, ...]) -> Any:
    """The general path after the DETAIL check (a function of its own: a closure in ``run``
    would make each of its variables a cell, on every call)."""

    def general() -> Any:
        return call.general(pg, *args, async_op) if call.takes_async_op else call.general(pg, *args)

    return detail.run(pg, call.name, general, call.detail, args)  # type: ignore[arg-type]
