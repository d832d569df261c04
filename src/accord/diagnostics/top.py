"""``accord top``: a live view of a running job, from the progress posts in its store.

Owns: finding the job's store (``--store``, a job file accordrun wrote, or torchrun's
MASTER_ADDR/MASTER_PORT), attaching to it with the job's secret as every accord process
does, reading the progress board's posts (``Snapshot``: one ``list_keys`` and one
``multi_get`` a refresh), and what they mean per group (``analyse``: the call the ranks wait
in, who is behind, who is silent, who failed); the command line and its refresh loop.
Rendering is ``top_view``'s; the posts' format and wording are ``progress``'s (the stuck
report reads them the same way).

The job pays nothing for being watched: its ranks post on the board whether or not anyone
looks (a background thread, off the call path), and this process only reads the store. Must
not know the API, groups' internals or the transport.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .. import auth, config
from ..errors import DistError
from ..rendezvous import job_files
from ..store.tcp_store import TCPStore
from . import progress, top_view

#: How long attaching (and then each read) may take before the view says the store is gone.
CONNECT_TIMEOUT_S = 3.0


class AttachError(Exception):
    """The job's store cannot be found or read; the message says why and what to do."""


# -- finding and attaching -------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """A store to read, and where its address came from."""

    host: str
    port: int
    source: str
    secret: str | None = None  # the job's, from its job file

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' → (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--store {text!r}: expected HOST:PORT, e.g. 127.0.0.1:29500")
    return host.strip("[]"), int(port)


def find_target(store: str | None, job: str | None) -> Target:
    """The store to watch: ``store`` ('host:port'); else the job file of ``job`` (a run id),
    or of the one job running on this host; else MASTER_ADDR/MASTER_PORT (torchrun's)."""
    if store:
        return Target(*parse_address(store), source="--store")
    jobs = job_files.running()
    if job is not None:
        for found in jobs:
            if found.run_id == job:
                return _from_job_file(found)
        raise AttachError(f"no running job {job!r} on this host. {_listing(jobs)}")
    if len(jobs) == 1:
        return _from_job_file(jobs[0])
    if len(jobs) > 1:
        raise AttachError(f"several jobs run on this host: pick one with --job RUN_ID. {_listing(jobs)}")
    addr, port = config.MASTER_ADDR.raw(), config.MASTER_PORT.raw()
    if addr and port and port.isdigit():
        return Target(addr, int(port), source="MASTER_ADDR/MASTER_PORT")
    return _nothing_found()


def _nothing_found() -> Target:
    raise AttachError(
        f"no running job found: accordrun writes a job file in {job_files.folder() or '(off)'} "
        f"and none is there (another ACCORD_JOBS_DIR, another host or user?). Pass the job's "
        f"store with --store HOST:PORT (torchrun's, or init_method tcp://'s: MASTER_ADDR:"
        f"MASTER_PORT), with its secret in ACCORD_SECRET or ACCORD_SECRET_FILE if it has one."
    )


def _from_job_file(job: job_files.JobFile) -> Target:
    source = f"job {job.run_id} (accordrun pid {job.pid}, attempt {job.attempt})"
    return Target(job.store_host, job.store_port, source, job.secret)


def _listing(jobs: list[job_files.JobFile]) -> str:
    if not jobs:
        return "None runs."
    return "Running: " + "; ".join(f"{j.run_id} (store {j.address}, pid {j.pid})" for j in jobs) + "."


def attach(target: Target, timeout: float = CONNECT_TIMEOUT_S) -> TCPStore:
    """A client of the job's store, proving the job's secret (the job file's, else
    ACCORD_SECRET / ACCORD_SECRET_FILE, as every accord process). AttachError, with what to
    do, when nothing answers there within ``timeout`` or the secret is refused."""
    if target.secret is not None:
        os.environ[auth.SECRET.name] = target.secret  # this process's own environment only
    try:
        return TCPStore(
            target.host, target.port, None, False, timedelta(seconds=timeout), wait_for_workers=False
        )
    except DistError as exc:
        raise AttachError(
            f"cannot read the job's store at {target.address} ({target.source}): {exc}"
        ) from None


# -- reading ---------------------------------------------------------------------------------
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


def read_snapshot(store: TCPStore, address: str, every_world: bool = False) -> Snapshot:
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
    name = str(newest.get("group", "default_pg" if group_id == 0 else f"group {group_id}"))
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


# -- the command -----------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="accord top",
        description="A live view of a running job: every rank's current call on each group, "
        "its sequence number, how long it has been in it, and who is behind. It reads the "
        "progress posts the ranks keep in the job's store (ACCORD_PROGRESS_INTERVAL, on by "
        "default); the job pays nothing for being watched.",
        epilog="Without --store: the job accordrun runs on this host (its job file), else "
        "MASTER_ADDR/MASTER_PORT (a torchrun job's store). The job's secret: from the job "
        "file, else ACCORD_SECRET or ACCORD_SECRET_FILE (or --secret-file).",
    )
    p.add_argument("--store", metavar="HOST:PORT", help="the job's store (torchrun: MASTER_ADDR:MASTER_PORT)")
    p.add_argument("--job", metavar="RUN_ID", help="which accordrun job on this host (its --rdzv-id)")
    p.add_argument("--secret-file", metavar="PATH", help="a file holding the job's secret (chmod 600)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes (1)")
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="JSON instead of text (one object per refresh)")
    p.add_argument("--all", action="store_true", help="every world in the store, not only the newest")
    p.add_argument(
        "--timeout", type=float, default=CONNECT_TIMEOUT_S, metavar="S",
        help=f"give up attaching, or reading, after S seconds ({CONNECT_TIMEOUT_S:g})",
    )  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """``accord top``: 0 when the view ended normally (--once, Ctrl-C, the job ended), 1 when
    the store cannot be found or read."""
    args = parser().parse_args(argv)
    if args.secret_file:
        os.environ[auth.SECRET_FILE.name] = args.secret_file
        os.environ.pop(auth.SECRET.name, None)
    try:
        target = find_target(args.store, args.job)
        store = attach(target, args.timeout)
    except (AttachError, ValueError, DistError) as exc:
        print(f"accord top: {exc}", file=sys.stderr)
        return 1
    try:
        return _show(store, target, args)
    finally:
        store.close()


def _show(store: TCPStore, target: Target, args: argparse.Namespace) -> int:
    live = not args.once and sys.stdout.isatty() and not args.json
    while True:
        try:
            snap = read_snapshot(store, target.address, args.all)
        except DistError as exc:
            if args.once:
                print(f"accord top: cannot read the job's store at {target.address}: {exc}", file=sys.stderr)
                return 1
            print(f"accord top: the job's store at {target.address} is gone (the job ended?): {exc}")
            return 0
        text = top_view.as_json(snap) if args.json else top_view.as_text(snap, target.source)
        sys.stdout.write((top_view.CLEAR if live else "") + text + "\n")
        sys.stdout.flush()
        if args.once:
            return 0
        try:
            time.sleep(max(0.1, args.interval))
        except KeyboardInterrupt:
            return 0
