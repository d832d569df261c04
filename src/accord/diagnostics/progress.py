"""Where each rank is on each group, and the stuck report built from it.

Owns: ``ProgressBoard`` — a background thread that publishes, in the job's store, where this
rank is on each of its groups (the call in flight, the last one completed), and
``stuck_report``, which a rank whose collective timed out builds from the others' posts: who
has reached that call, who has not, and what each laggard did last; and the reading of posts
for everyone else (``KEY``, ``parse_post``, ``reached``, ``where``), which ``accord top``
(``top``) shares with the report so that both say the same thing.

Publishing costs nothing on the hot path: the thread looks every ``interval`` seconds (or a
quarter of the shortest group timeout, if shorter) and writes a group's state once when it
first sees the group, then only once it has stopped changing for a whole period (a rank that
is stuck, or busy outside accord). A job that makes progress writes little; a job that hangs
has every rank's position in the store within two periods, well before the first timeout. A
frozen rank (SIGSTOP, a debugger) cannot publish: its last post, with its age, is what the
report shows.

Must not know about the flight-recorder files or the API.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from typing import Any

from ..group.process_group import ProcessGroup
from ..store.base import Store

_MAX_REPORTED = 64  # members whose posts a report reads (the first ones, in rank order)
STORE_WAIT_S = 2.0  # how long a timed-out call waits for the store to build its report
_MIN_PERIOD_S = 0.05  # the board thread never looks more often than this
#: A post's key in the store (under whatever prefixes wrap the job's store): the world's
#: prefix, the group's id, the poster's global rank.
KEY = re.compile(r"^(?P<world>.*)/progress/(?P<group>\d+)/(?P<rank>\d+)$")


class ProgressBoard:
    """Publishes this rank's position on its groups; reads the others' for a stuck report."""

    def __init__(
        self, store: Store, prefix: str, rank: int, interval: float, owns_store: bool = False
    ) -> None:
        self._store = store
        self._owns_store = owns_store  # a clone made for the board: closed with it
        self._prefix = f"{prefix}/progress"
        self.rank = rank
        self.interval = interval
        self._groups: dict[int, ProcessGroup] = {}
        self._seen: dict[int, tuple[int, int, int, int]] = {}  # recorder stamps
        self._published: dict[int, tuple[int, int, int, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._host = socket.gethostname()

    def key(self, group: ProcessGroup, global_rank: int) -> str:
        return f"{self._prefix}/{group.group_id}/{global_rank}"

    def add(self, group: ProcessGroup) -> None:
        with self._lock:
            self._groups[group.group_id] = group
            if self._thread is None and self.interval > 0 and group.size() > 1:
                self._thread = threading.Thread(
                    target=self._loop, daemon=True, name=f"accord-progress-board-{self.rank}"
                )
                self._thread.start()

    def remove(self, group: ProcessGroup) -> None:
        with self._lock:
            self._groups.pop(group.group_id, None)
            self._seen.pop(group.group_id, None)
            self._published.pop(group.group_id, None)

    def close(self) -> None:
        """Stop posting; close the board's own store handle (so that a store host that is
        exiting does not wait for this connection)."""
        self._stop.set()
        if self._owns_store:
            try:
                self._store.close()
            except Exception:  # noqa: BLE001 — the store may be gone already
                pass

    # -- publishing ----------------------------------------------------------------------------
    def publish(self, group: ProcessGroup) -> None:
        """Write this rank's position on ``group`` now."""
        post = group.recorder.progress()
        post.update(t=time.time(), pid=os.getpid(), host=self._host, broken=group.is_broken())
        post.update(group=group.group_name, size=group.size())
        if group.group_desc and group.group_desc != group.group_name:
            post["desc"] = group.group_desc  # torch's default group: name "0", desc "default_pg"
        if group.ranks != list(range(group.size())) and group.size() <= _MAX_REPORTED:
            post["ranks"] = list(group.ranks)  # the members, when not simply 0 … size-1
        self._store.set(self.key(group, self.rank), json.dumps(post))
        self._published[group.group_id] = group.recorder.stamp()

    def period(self) -> float:
        """How often the thread looks: ``interval``, or a quarter of the shortest timeout of
        the groups if that is shorter (a stuck report at a 2 s timeout must find posts made
        since the last call began), but not more often than every 50 ms."""
        with self._lock:
            shortest = min((g.calls.timeout for g in self._groups.values()), default=self.interval)
        return max(_MIN_PERIOD_S, min(self.interval, shortest / 4))

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(self.period()):
            with self._lock:
                groups = list(self._groups.values())
            for group in groups:
                stamp = group.recorder.stamp()
                gid = group.group_id
                # the first look posts at once: a rank busy from the start is not 'silent'
                first = gid not in self._published
                if (first or stamp == self._seen.get(gid)) and stamp != self._published.get(gid):
                    try:
                        self.publish(group)
                        failures = 0
                    except Exception:  # noqa: BLE001 — the store is gone: the job is ending
                        failures += 1
                        if failures >= 3:
                            return
                self._seen[gid] = stamp

    # -- reading -------------------------------------------------------------------------------
    def read(self, group: ProcessGroup, ranks: list[int] | None = None) -> dict[int, dict[str, Any] | None]:
        """The last post of each other member (of ``ranks``, default the first members;
        None: it never posted)."""
        posts: dict[int, dict[str, Any] | None] = {}
        for global_rank in group.ranks[:_MAX_REPORTED] if ranks is None else ranks:
            if global_rank == self.rank:
                continue
            key = self.key(group, global_rank)
            posts[global_rank] = parse_post(self._store.get(key)) if self._store.check([key]) else None
        return posts


def parse_post(raw: bytes) -> dict[str, Any] | None:
    """A post as the board wrote it; None for a value that is not one."""
    try:
        post = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return post if isinstance(post, dict) and "t" in post else None


def _exchange(
    board: ProgressBoard, group: ProcessGroup, ranks: list[int] | None = None
) -> tuple[dict[int, Any] | None, str]:
    """Publish this rank's position on ``group`` and read the others' posts: (posts, "") or
    (None, why the store could not be read)."""
    outcome: dict[str, Any] = {}

    def exchange() -> None:
        try:
            board.publish(group)  # so that the ranks timing out after this one see it here
            outcome["posts"] = board.read(group, ranks)
        except Exception as exc:  # noqa: BLE001 — never hide the timeout behind a store problem
            outcome["error"] = exc

    # The store may be what is stuck (its host is the frozen rank): wait for it briefly only.
    helper = threading.Thread(target=exchange, daemon=True, name="accord-stuck-report")
    helper.start()
    helper.join(STORE_WAIT_S)
    if "posts" not in outcome:
        error = outcome.get("error")
        why = (
            f"{type(error).__name__}: {error}"
            if error is not None
            else f"it did not answer within {STORE_WAIT_S:g} s; is the store's host (rank 0 for "
            f"env:// and tcp://) frozen or gone?"
        )
        return None, why
    return outcome["posts"], ""


def stuck_report(board: ProgressBoard, group: ProcessGroup, seq: int, op: str) -> tuple[str, list[int]]:
    """Who has and has not reached call #seq of ``group``, and what each laggard did last;
    with the ranks that did not reach it as far as the posts tell (laggards, then the silent)."""
    posts, why = _exchange(board, group)
    if posts is None:
        return f"(no stuck report: the store could not be read: {why})", []
    now = time.time()
    arrived, lagging, unknown = [board.rank], [], []
    for global_rank, post in posts.items():
        if post is None:
            unknown.append(global_rank)
        elif reached(post, seq):
            arrived.append(global_rank)
        else:
            lagging.append((global_rank, post))
    lines = [
        f"Stuck report for {op} #{seq} on group {group.group_name!r}{_desc(group)} (ranks as last posted in "
        f"the store): reached it: {rank_list(sorted(arrived))}; not reached: "
        f"{rank_list(sorted(r for r, _ in lagging)) if lagging else 'none that posted'}"
        + (f"; no post from {rank_list(sorted(unknown))}" if unknown else "")
        + "."
    ]
    for global_rank, post in lagging:
        lines.append(f"  rank {global_rank}: {where(post, now)}")
    if unknown:
        lines.append(
            f"  {rank_list(sorted(unknown))}: posted nothing: busy without a pause since the "
            f"job started, frozen (SIGSTOP, a debugger), or on another store"
        )
    if len(group.ranks) > _MAX_REPORTED:
        lines.append(f"  (only the first {_MAX_REPORTED} ranks of the group were read)")
    return "\n".join(lines), sorted(r for r, _ in lagging) + sorted(unknown)


def peer_report(board: ProgressBoard, group: ProcessGroup, peer: int | None) -> str:
    """What the peer of a p2p operation that timed out (global rank ``peer``; None: any rank,
    then every other member) was doing, as last posted in the store."""
    posts, why = _exchange(board, group, None if peer is None else [peer])
    if posts is None:
        return f"(no peer report: the store could not be read: {why})"
    now = time.time()
    chosen = sorted(posts) if peer is None else [peer]
    lines = [
        f"Peer report ({'every other rank' if peer is None else f'rank {peer}'}, as last "
        f"posted in the store):"
    ]
    for global_rank in chosen:
        post = posts.get(global_rank)
        if post is None:
            lines.append(
                f"  rank {global_rank}: posted nothing: busy without a pause since the "
                f"job started, frozen (SIGSTOP, a debugger), or on another store"
            )
        else:
            lines.append(f"  rank {global_rank}: {where(post, now)}")
    return "\n".join(lines)


def reached(post: dict[str, Any], seq: int) -> bool:
    """Whether the poster had entered (or completed) call #seq of its group."""
    current, done = post.get("current"), post.get("last_done")
    return bool((current and current["seq"] >= seq) or (done and done["seq"] >= seq))


def describe_call(entry: dict[str, Any]) -> str:
    """'all_reduce #12 (float32, 4 elements)', of a post's call entry."""
    parts = [p for p in (entry.get("dtype"), f"{entry['count']} elements" if "count" in entry else "") if p]
    return f"{entry['op']} #{entry['seq']}" + (f" ({', '.join(parts)})" if parts else "")


def where(post: dict[str, Any], now: float) -> str:
    """What the poster does (``doing``), with the post's age and the process that made it."""
    age = f"posted {span(now - post['t'])} ago"
    return f"{doing(post, now)} [{age}, pid {post.get('pid')} on {post.get('host')}]"


def doing(post: dict[str, Any], now: float) -> str:
    """What the poster was doing on its group, its spans measured to ``now``: in which call
    and for how long, its open p2p operations, or what it did last."""
    current, done = post.get("current"), post.get("last_done")
    if current is not None and current.get("state") == "failed":
        text = f"{describe_call(current)} failed: {current.get('error', '')[:200]}"
    elif current is not None:
        text = f"in {describe_call(current)} for {span(now - current['start'])}"
    elif post.get("p2p_open"):
        text = f"not in a collective of this group: {p2p_waits(post, now)}"
    elif post.get("p2p_failed"):
        failed = post["p2p_failed"]
        text = (
            f"not in a collective of this group: its {describe_p2p(failed)} failed "
            f"{span(now - (failed.get('end') or now))} ago: "
            f"{failed.get('error', '')[:200].splitlines()[0]}"
        )
    elif done is not None:
        text = (
            f"not in a collective of this group: its last one, {describe_call(done)}, ended "
            f"{span(now - done['end'])} ago (computing, or blocked outside accord?)"
        )
    else:
        text = "has not started a collective on this group yet"
    return text


def describe_p2p(item: dict[str, Any]) -> str:
    """'recv from rank 0 (tag 3, 64 bytes)', for reports."""
    towards = "to" if item["op"] in ("send", "isend") else "from"
    peer = "any rank" if item.get("peer") is None else f"rank {item['peer']}"
    return f"{item['op']} {towards} {peer} (tag {item['tag']}, {item['nbytes']} bytes)"


def p2p_waits(post: dict[str, Any], now: float) -> str:
    """The open p2p operations of a progress post, oldest first: 'waiting in recv from rank 0
    (tag 3, 64 bytes) for 4.0 s (and 2 more open p2p operations)'."""
    ops = post["p2p_open"]
    first = ops[0]
    more = post.get("p2p_open_count", len(ops)) - 1
    return f"waiting in {describe_p2p(first)} for {span(now - first['start'])}" + (
        f" (and {more} more open p2p operation{'s' if more > 1 else ''})" if more else ""
    )


def span(seconds: float) -> str:
    """A duration for people: '4.0 s', '35 ms'."""
    seconds = max(0.0, seconds)
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1e3:.0f} ms"


def rank_list(ranks: list[int]) -> str:
    if not ranks:
        return "none"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _desc(group: Any) -> str:
    """' (default_pg)' where a group's description says more than its name."""
    desc = getattr(group, "group_desc", None)
    return f" ({desc})" if desc and desc != group.group_name else ""
