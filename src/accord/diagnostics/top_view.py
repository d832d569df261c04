"""How ``accord top`` shows a snapshot: plain text for people, JSON for scripts.

Owns: the layout of a group's block (a summary line saying which call the ranks wait in, for
how long, and who is behind, then a row per rank) and the JSON document of a snapshot. The
words for one rank's position are ``progress``'s (``doing``: the stuck report says the same).
Must not know where the snapshot came from (the store, the job file) or how it is refreshed.
"""

from __future__ import annotations

import json
import time
from typing import Any

from . import progress
from .job_view import GroupView, Snapshot

#: Clears a terminal and puts the cursor at its top left (the live view redraws in place).
CLEAR = "\x1b[H\x1b[2J"
_LABELS = {
    "behind": "BEHIND",
    "failed": "FAILED",
    "silent": "silent",
    "waiting": "waiting",
    "idle": "idle",
    "p2p": "p2p",
}


def as_text(snap: Snapshot, source: str) -> str:
    """The whole view: a header, then a block per group."""
    clock = time.strftime("%H:%M:%S", time.localtime(snap.now))
    lines = [f"accord top  store {snap.address}  {source}  {clock}"]
    if not snap.groups:
        lines.append(
            "no progress posts in this store yet: the job has not finished init_process_group, "
            "publishing is off (ACCORD_PROGRESS_INTERVAL=0), or this is not the job's store"
        )
        return "\n".join(lines)
    world = None
    for group in snap.groups:
        if group.world != world:
            world = group.world
            lines.append(f"world {world or '(root)'}")
        lines.append("")
        lines.extend(group_lines(group, snap.now))
    if snap.other_worlds:
        lines.append(f"\n({snap.other_worlds} older world(s) in the store not shown: --all shows them)")
    return "\n".join(lines)


def group_lines(group: GroupView, now: float) -> list[str]:
    """A group's summary line, then one row per rank."""
    lines = [f"group {group.name} (id {group.group_id}, {group.size} ranks): {summary(group, now)}"]
    width = max(len(str(row.rank)) for row in group.rows)
    lines.append(f"  {'rank':>{max(4, width)}}  {'state':<7}  {'posted':>10}  where")
    for row in group.rows:
        post = row.post
        if post is None:
            what, posted = "posted nothing yet: busy since it started, frozen, or not in the job", "-"
        else:
            what = progress.doing(post, now) + f"  (pid {post.get('pid')} on {post.get('host')})"
            posted = progress.span(now - post["t"]) + " ago"
        lines.append(f"  {row.rank:>{max(4, width)}}  {_LABELS[row.state]:<7}  {posted:>10}  {what}")
    return lines


def summary(group: GroupView, now: float) -> str:
    """'ranks 0, 1, 3 wait in all_reduce #2 (float32, 4 elements) for 5.2 s; behind: rank 2
    (its last call: all_reduce #1)' — or what else the group is doing."""
    parts = []
    call, behind = group.call, group.ranks_in("behind")
    if call is not None:
        waiting = group.ranks_in("waiting")
        who = (
            "every rank is" if not behind and len(waiting) == len(group.rows) else progress.rank_list(waiting)
        )
        verb = "" if who.startswith("every") else (" waits" if len(waiting) == 1 else " wait")
        parts.append(
            f"{who}{verb} in {progress.describe_call(call)} for {progress.span(now - call['start'])}"
        )
    if behind:
        lasts = [_last_call(row.post) for row in group.rows if row.state == "behind"]
        parts.append(f"BEHIND (not in it yet): {progress.rank_list(behind)} ({'; '.join(lasts)})")
    failed = group.ranks_in("failed")
    if failed:
        parts.append(f"FAILED: {progress.rank_list(failed)}")
    silent = group.ranks_in("silent")
    if silent:
        parts.append(f"no post from {progress.rank_list(silent)}")
    if call is None and not failed:
        parts.insert(0, "no rank is in a collective of this group")
    return "; ".join(parts)


def _last_call(post: dict[str, Any] | None) -> str:
    done = None if post is None else post.get("last_done")
    return "no call yet" if done is None else f"last done: {progress.describe_call(done)}"


def as_json(snap: Snapshot) -> str:
    """One JSON object: the store, the instant, and per group its call, who waits in it, who
    is behind, and every rank's post with its ages (seconds) worked out."""
    return json.dumps(
        {
            "store": snap.address,
            "time": snap.now,
            "other_worlds": snap.other_worlds,
            "groups": [_group_json(g, snap.now) for g in snap.groups],
        }
    )


def _group_json(group: GroupView, now: float) -> dict[str, Any]:
    call = group.call
    return {
        "world": group.world,
        "id": group.group_id,
        "name": group.name,
        "size": group.size,
        "call": None if call is None else {**call, "waiting_s": now - call["start"]},
        "states": {state: group.ranks_in(state) for state in _LABELS if group.ranks_in(state)},
        "ranks": {
            str(row.rank): {
                "state": row.state,
                "doing": None if row.post is None else progress.doing(row.post, now),
                "posted_s": None if row.post is None else now - row.post["t"],
                "post": row.post,
            }
            for row in group.rows
        },
    }
