"""``accord top``: a live view of a running job, from the progress posts in its store.

Owns: finding the job's store (``--store``, a job file accordrun wrote, or torchrun's
MASTER_ADDR/MASTER_PORT), attaching to it with the job's secret as every accord process
does, the command line and its refresh loop. What the posts say is ``job_view``'s (which
reads them as the stuck report does, through ``progress``); drawing it is ``top_view``'s.

The job pays nothing for being watched: its ranks post on the board whether or not anyone
looks (a background thread, off the call path), and this process only reads the store. Must
not know the API, groups' internals or the transport.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

from .. import auth, config
from ..errors import DistError
from ..rendezvous import job_files
from ..store.tcp_store import TCPStore
from . import top_view
from .job_view import Snapshot, read_snapshot

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
    run_id: str | None = None  # the accordrun job whose file named it

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
    return Target(job.store_host, job.store_port, source, job.secret, job.run_id)


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
    p.add_argument("--interval", type=float, default=0.5, metavar="S", help="seconds between refreshes (0.5)")
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
        return _refresh(_read(target, args), target, args)
    except (AttachError, ValueError, DistError) as exc:
        print(f"accord top: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def _read(target: Target, args: argparse.Namespace) -> Snapshot:
    """One snapshot over a connection of its own: between refreshes this process holds no
    connection, so a store hosted by rank 0 never waits for it when the job ends
    (ACCORD_STORE_EXIT_GRACE waits for other processes' clients)."""
    store = attach(target, args.timeout)
    try:
        return read_snapshot(store, target.address, args.all)
    except DistError as exc:
        raise AttachError(f"cannot read the job's store at {target.address}: {exc}") from None
    finally:
        store.close()


def _refresh(snap: Snapshot, target: Target, args: argparse.Namespace) -> int:
    live = not args.once and sys.stdout.isatty() and not args.json
    while True:
        text = top_view.as_json(snap) if args.json else top_view.as_text(snap, target.source)
        sys.stdout.write((top_view.CLEAR if live else "") + text + "\n")
        sys.stdout.flush()
        if args.once:
            return 0
        time.sleep(max(0.1, args.interval))
        try:
            snap = _read(target, args)
        except AttachError as exc:
            moved = _next_attempt(target)
            if moved is None:
                print(f"accord top: the job's store is gone (the job ended?): {exc}")
                return 0
            target = moved


def _next_attempt(target: Target) -> Target | None:
    """The store of the job's next attempt, when accordrun restarted it (its job file names
    a new one); None: the job ended, or was not found through its job file."""
    if target.run_id is None:
        return None
    try:
        moved = find_target(None, target.run_id)
    except AttachError:
        return None
    return moved if moved.address != target.address else None
