"""New processes joining a running job: ``grow_group`` (the job's side) and
``join_process_group`` (the newcomer's).

Owns: the admission protocol on the job's store, and the two public calls over it. A
newcomer (a replacement for a lost rank, or an extra one) knows only the job's store: it
takes a ticket (``accord/join/asked``, a counter) and says it is here
(``accord/join/<ticket>/here``), then waits for its admission. The job's ranks all call
``grow_group(world_size)``; the current world's rank 0 waits for the next tickets in order
(``accord/join/taken`` counts those already admitted, so successive growths take new
ones), names the new world's store prefix, tells each newcomer its rank
(``accord/join/<ticket>/admit``: the job's ranks keep theirs, newcomers follow in ticket
order) and tells the job's ranks (``<world prefix>/change<n>/decision``). Then all of them
meet as a new world (``membership.move_world`` for the job's ranks; ``build_world`` for the
newcomer), which replaces the old one. The keys under ``accord/join/`` belong to the whole
job, not to one world: the newcomer cannot know the current world's prefix.

State is not moved here: the program broadcasts it (the README's recovery loop). Must not
know about torch (``integrations.torch`` does the same through torch's API) or the launcher.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from datetime import timedelta
from typing import Any

from ..backend_names import resolve_backend
from ..errors import DistTimeoutError, StoreTimeoutError
from ..group.process_group import ProcessGroup
from ..rendezvous.handlers import client_store
from ..store.base import Store
from ..timeouts import DEFAULT_PG_TIMEOUT, to_seconds
from ..world import World, current_world
from .adoption import add_device_groups, adopt
from .membership import move_world, record_change
from .worlds import build_world

_ASKED, _TAKEN = "accord/join/asked", "accord/join/taken"


def grow_group(world_size: int, timeout: timedelta | None = None) -> ProcessGroup:
    """Take newcomers (``join_process_group``) into the job until it has ``world_size``
    ranks: every rank of the job calls this, and waits (up to ``timeout``, default the
    default group's) for enough newcomers to ask. The ranks keep their numbers; newcomers
    get the next ones, in the order they asked. The default group is replaced (every other
    group is destroyed, as by ``shrink_group``); returns the new default group.

    Raises:
        ValueError: ``world_size`` not larger than the world, a world without a store.
        TypeError: a world whose engine cannot change (backend mpi).
        DistTimeoutError: too few newcomers asked in time (says how many did).
    """
    world = current_world()
    assert world is not None
    if world.mesh is None or not isinstance(world.default_group, ProcessGroup) or world.store is None:
        raise TypeError(
            f"grow_group: the groups of this world run on backend {world.backend!r}, which cannot grow"
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= world.size:
        raise ValueError(
            f"grow_group: world_size must be an int larger than the world's {world.size}, got {world_size!r}"
        )
    seconds = to_seconds(timeout, default=to_seconds(world.default_group.timeout))
    others = [g.group_name for g in world.groups]
    if others:
        warnings.warn(
            f"Growing the default group destroys the {len(others)} other process groups: "
            f"{', '.join(others)} (they are made again on the new world, as after init).",
            stacklevel=2,
        )
    decision = decide(world, world_size, seconds)
    what = {"what": "grow_group", "admitted": world_size - world.size}
    return move_world(world, world.rank, world_size, decision["prefix"], "default:grown", lambda: "", what)


def decide(world: World, world_size: int, seconds: float, store: Store | None = None) -> dict[str, Any]:
    """Whom ``world`` takes in to reach ``world_size`` ranks, and where they all meet (the
    newcomers are told): rank 0 decides, the others read its decision. Every rank of the
    world calls this. ``store``: the job's store as newcomers see it (default the world's)."""
    store = world.store if store is None else store
    base = f"{world.store_prefix}/change{world.changes + 1}"
    assert store is not None
    if world.rank == 0:
        return _admit(store, world, base, world_size - world.size, seconds)
    return json.loads(_get(store, f"{base}/decision", seconds, "rank 0's decision of whom to admit"))  # type: ignore[no-any-return]


def _admit(store: Store, world: World, base: str, needed: int, seconds: float) -> dict[str, Any]:
    """Rank 0's part: wait for ``needed`` newcomers, number them, tell everyone."""
    taken = store.add(_TAKEN, 0)
    tickets = list(range(taken + 1, taken + needed + 1))
    try:
        store.wait([f"accord/join/{t}/here" for t in tickets], timedelta(seconds=seconds))
    except StoreTimeoutError:
        asked = store.add(_ASKED, 0) - taken
        raise DistTimeoutError(
            f"grow_group on rank 0: {asked} of the {needed} newcomer(s) needed asked to join within "
            f"{seconds:g} s (a newcomer calls accord.join_process_group with the job's store)"
        ) from None
    digest = hashlib.blake2b(json.dumps([base, tickets]).encode(), digest_size=6).hexdigest()
    decision = {
        "prefix": f"{base}-{digest}",
        "size": world.size + needed,
        "changes": world.changes + 1,
        "admitted": needed,
        "backend": world.backend,
        "devices": world.device_backends,
        "history": world.membership,  # (the newcomers' dumps show the job's changes too)
    }
    for i, ticket in enumerate(tickets):
        store.set(f"accord/join/{ticket}/admit", json.dumps({**decision, "rank": world.size + i}))
    store.add(_TAKEN, needed)
    store.set(f"{base}/decision", json.dumps(decision))
    return decision


def _get(store: Store, key: str, seconds: float, what: str) -> bytes:
    try:
        store.wait([key], timedelta(seconds=seconds))
    except StoreTimeoutError:
        raise DistTimeoutError(f"grow_group: {what} did not come within {seconds:g} s") from None
    return store.get(key)


def ask(store: Store, seconds: float) -> dict[str, Any]:
    """A newcomer's part: take a ticket, say it is here, wait for its admission (its rank,
    the world's size and prefix, backend, device backends, membership changes so far)."""
    ticket = store.add(_ASKED, 1)
    store.set(f"accord/join/{ticket}/here", "1")
    try:
        store.wait([f"accord/join/{ticket}/admit"], timedelta(seconds=seconds))
    except StoreTimeoutError:
        raise DistTimeoutError(
            f"join_process_group: newcomer #{ticket} was not admitted within {seconds:g} s: "
            f"the job's ranks admit newcomers when they call accord.grow_group"
        ) from None
    return json.loads(store.get(f"accord/join/{ticket}/admit"))  # type: ignore[no-any-return]


def join_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: timedelta | None = None,
    store: Store | None = None,
) -> None:
    """Join a job that is already running, as a new rank (a replacement for a lost one, or
    one more): ask on the job's store (``init_method`` env:// — the default — or
    tcp://host:port naming its TCPStore, or ``store=``) and wait until the job's ranks call
    ``grow_group``; then this process has a world, as after ``init_process_group``, with
    the rank the job gave it (``get_rank()``; the job's ranks keep theirs).

    Raises:
        ValueError: already initialized, an init_method that names no TCPStore.
        DistTimeoutError: nobody admitted this process within ``timeout`` (default 30 min).
    """
    if current_world(required=False) is not None:
        raise ValueError("join_process_group: this process is already in a job (init_process_group)")
    name = resolve_backend(backend)
    seconds = to_seconds(timeout, default=DEFAULT_PG_TIMEOUT)
    owns_store = store is None
    if store is None:
        store = client_store(init_method or "env://", timedelta(seconds=seconds))
    try:
        admit = ask(store, seconds)
        if backend is not None and name != admit["backend"]:
            raise ValueError(f"join_process_group: the job runs backend {admit['backend']!r}, not {name!r}")
        world = build_world(
            store, admit["rank"], admit["size"], admit["backend"], seconds, owns_store, prefix=admit["prefix"]
        )
    except BaseException:
        if owns_store:
            store.close()
        raise
    world.changes = admit["changes"]
    world.store_prefix = admit["prefix"]
    world.default_group.group_desc = "default:grown"
    joined = {"what": "join_process_group", "admitted": admit["admitted"]}
    record_change(
        world,
        admit["history"],
        joined,
        (admit["size"] - admit["admitted"], admit["size"]),
        (None, admit["rank"]),
    )
    try:
        add_device_groups(world, world.default_group, admit["devices"])
    except BaseException:
        world.destroy()
        raise
    world.device_backends = admit["devices"]
    adopt(world)
