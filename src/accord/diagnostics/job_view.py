"""What a job's progress posts say, group by group: the model ``accord top`` shows.

Owns: reading every post in a store (``read_snapshot``: one ``list_keys`` and one
``multi_get``; posts under any prefix, grouped by world and group, the newest world first)
and what they mean for a group (``analyse``: the call its ranks wait in — the furthest one in
flight —, who is behind (has not reached it), who failed, who is idle, who never posted).
The posts' format and the words for one rank are ``progress``'s, which the stuck report
shares. Must not know where the store came from, how the view is drawn or refreshed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..store.base import Store
from . import progress


@dataclass
class RankRow:
    """One member of a group, as its last post tells."""

    rank: int
    state: str  # waiting | behind | failed | idle | p2p | silent (no post)
    post: dict[str, Any] | None


@dataclass
class GroupView:
    """One group of one world: where its members are."""

    world: str
    group_id: int
    name: str
    size: int
    call: dict[str, Any] | None  # the call ranks wait in (the furthest one in flight)
    rows: list[RankRow] = field(default_factory=list)

    def ranks_in(self, state: str) -> list[int]:
        return [row.rank for row in self.rows if row.state == state]


@dataclass
class Snapshot:
    """Every group's view at one instant (``now``, Unix seconds)."""

    address: str
    now: float
    groups: list[GroupView]
    other_worlds: int = 0  # worlds left out (older ones: earlier attempts or inits)


def read_snapshot(store: Store, address: str, every_world: bool = False) -> Snapshot:
    """The posts in the store now, by group, of the newest world (``every_world``: of all)."""
    keys = [k for k in store.list_keys() if progress.KEY.match(k)]
    values = store.multi_get(keys) if keys else []
    by_group: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for key, raw in zip(keys, values, strict=True):
        match, post = progress.KEY.match(key), progress.parse_post(raw)
        if match is None or post is None:
            continue
        where = (match["world"], int(match["group"]))
        by_group.setdefault(where, {})[int(match["rank"])] = post
    newest: dict[str, float] = {}
    for (world, _), posts in by_group.items():
        newest[world] = max(newest.get(world, 0.0), *(p["t"] for p in posts.values()))
    worlds = sorted(newest, key=lambda w: newest[w], reverse=True)
    shown = worlds if every_world else worlds[:1]
    now = time.time()
    groups = [analyse(w, gid, posts, now) for (w, gid), posts in sorted(by_group.items()) if w in shown]
    return Snapshot(address, now, groups, len(worlds) - len(shown))


def analyse(world: str, group_id: int, posts: dict[int, dict[str, Any]], now: float) -> GroupView:
    """Who waits in which call of the group, who is behind (has not reached it), who failed,
    who is silent (a member that never posted)."""
    newest = max(posts.values(), key=lambda p: p["t"])
    size = int(newest.get("size", len(posts)))
    members = newest.get("ranks") or (list(range(size)) if group_id == 0 else sorted(posts))
    in_flight = [p["current"] for p in posts.values() if _in_call(p)]
    call = max(in_flight, key=lambda c: (c["seq"], -c["start"])) if in_flight else None
    if call is not None:  # the earliest start of that call: how long the first waiter waits
        call = dict(call, start=min(c["start"] for c in in_flight if c["seq"] == call["seq"]))
    rows = [RankRow(r, _state(posts.get(r), call), posts.get(r)) for r in members]
    rows += [RankRow(r, _state(p, call), p) for r, p in sorted(posts.items()) if r not in members]
    name = str(newest.get("group", str(group_id)))
    if newest.get("desc"):
        name = f"{name} ({newest['desc']})"
    return GroupView(world, group_id, name, size, call, rows)


def _in_call(post: dict[str, Any]) -> bool:
    current = post.get("current")
    return current is not None and current.get("state") != "failed"


def _state(post: dict[str, Any] | None, call: dict[str, Any] | None) -> str:
    if post is None:
        return "silent"
    current = post.get("current")
    if current is not None and current.get("state") == "failed":
        return "failed"
    if call is not None and not progress.reached(post, call["seq"]):
        return "behind"
    if current is not None:
        return "waiting"
    return "p2p" if post.get("p2p_open") else "idle"
