"""Where a running job's store can be found from outside the job: one file per job.

Owns: the job file's place (``config.jobs_dir()``: ``$XDG_RUNTIME_DIR/accord-jobs``, else
``<tmp>/accord-jobs-<uid>``; a folder only its owner may enter), its format (JSON: the run id,
the launcher's pid and host, the store its workers meet in this attempt, the attempt, and the
secret if the launcher made it — the file is its owner's only, as ``ACCORD_SECRET_FILE``
requires), writing it atomically, removing it, and listing the jobs whose launcher still
runs (a file left by a killed launcher is removed when found). accordrun writes one per
launcher: the file is named by the run id *and* the launcher's pid, so that the launchers of
one job on one host (``--nnodes 2`` started twice here) do not overwrite each other's, and the
first to end does not take the job's file away from the others; a job is listed once. ``accord
top`` reads them. Must not know what a launcher or a worker does.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass

from .. import config

_SUFFIX = ".json"


@dataclass(frozen=True)
class JobFile:
    """One running job, as its launcher describes it."""

    run_id: str
    pid: int  # the launcher's
    host: str  # the launcher's
    store_host: str  # the store the workers of the current attempt meet in
    store_port: int
    attempt: int
    secret: str | None = None  # only a secret the launcher made (one it was given stays out)
    started: float = 0.0

    @property
    def address(self) -> str:
        return f"{self.store_host}:{self.store_port}"


def folder() -> str:
    """Where job files go ("" when ``ACCORD_JOBS_DIR=off``)."""
    return config.jobs_dir()


def path_of(run_id: str, pid: int) -> str:
    """The file of ``run_id``'s launcher ``pid``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
    return os.path.join(folder(), f"{safe}.{pid}{_SUFFIX}")


def write(job: JobFile) -> str | None:
    """Write (or replace) ``job``'s file, readable by its owner only; its path, or None when
    job files are off or the folder cannot be made (a job runs without one)."""
    where = folder()
    if not where:
        return None
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".job-", dir=where)  # mode 600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(job), f)
        path = path_of(job.run_id, job.pid)
        os.replace(temporary, path)
        return path
    except OSError:
        return None


def remove(run_id: str, pid: int) -> None:
    """Remove the file launcher ``pid`` wrote for ``run_id`` (another launcher's stays)."""
    try:
        os.unlink(path_of(run_id, pid))
    except OSError:
        pass


def read(path: str) -> JobFile | None:
    """The job a file describes; None if it is missing or not a job file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return JobFile(**data)
    except (OSError, ValueError, TypeError):
        return None


def running() -> list[JobFile]:
    """The jobs whose launcher runs, newest first, each once (of a job's several launchers
    here, the file of the latest attempt); stale files of this host are removed."""
    where = folder()
    try:
        names = sorted(n for n in os.listdir(where) if n.endswith(_SUFFIX)) if where else []
    except OSError:
        return []
    here, jobs = socket.gethostname(), []
    for name in names:
        path = os.path.join(where, name)
        job = read(path)
        if job is None:
            continue
        if job.host == here and not _alive(job.pid):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        jobs.append(job)
    latest: dict[str, JobFile] = {}
    for job in jobs:
        seen = latest.get(job.run_id)
        if seen is None or (job.attempt, job.started) > (seen.attempt, seen.started):
            latest[job.run_id] = job
    return sorted(latest.values(), key=lambda j: j.started, reverse=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
