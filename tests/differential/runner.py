"""Run the differential scripts in real processes, one process group per job.

``run_job(impl, world_size)`` starts ``world_size`` processes (multiprocessing "spawn"; for
the implementations with torch tensors, "forkserver" with torch imported once in the server:
tests/torch_forkserver.py), which join one process group through env:// (MASTER_ADDR=127.0.0.1,
a free port) and run every script of that implementation in sequence, sending each result back
over a pipe. It returns a ``JobResult``: ``results[name]`` is the list of per-rank results,
``failures[name]`` the children's tracebacks for a script that raised (or hung, or whose
process died).

A failing script aborts its job (its peers may be stuck in a collective): the children are
killed and a fresh job runs the scripts that had not completed, so one failure does not hide
the others. Every wait has a deadline and every child is killed at the end.

Implementations (the accord ones differ in transport and algorithm choice too, so that
together they run every algorithm family on every script):
    torch-gloo        torch.distributed, backend="gloo", torch tensors
    accord-numpy      accord, backend=None, NumPy arrays (torch is never imported); the default
                      transport (shared memory, all ranks being on one host), 64 KiB slots
    accord-numpy-tcp  as accord-numpy over TCP, with the default size rule (latency
                      algorithms for small messages, bandwidth ones for large)
    accord-torch      accord, backend="gloo" (accord answers to that name), torch tensors, over
                      TCP with the bandwidth algorithms (ring all_reduce, pipelined broadcast)
                      at every size, in 4 KiB segments
    torch-accord      torch.distributed itself, backend="accord": torch's API and checks, then
                      accord's process group behind it (shared memory)
    accord-mpi        accord, backend="mpi", NumPy arrays, started by ``mpiexec -n N`` (MPICH
                      from the ``mpi`` extra): MPI's own collectives behind accord's API; the
                      children report over a local socket instead of a pipe
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import socket
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any

from . import scripts


@dataclass(frozen=True)
class Implementation:
    module: str
    backend: str | None
    torch_tensors: bool
    env: tuple[tuple[str, str], ...] = ()  # set in the children before the import
    mpiexec: bool = False  # started by mpiexec (backend mpi), not by multiprocessing

    @property
    def is_torch_gloo(self) -> bool:
        return self.module == "torch.distributed"


IMPLEMENTATIONS: dict[str, Implementation] = {
    "torch-gloo": Implementation("torch.distributed", "gloo", torch_tensors=True),
    "accord-numpy": Implementation("accord", None, torch_tensors=False,
                                   env=(("ACCORD_SHM_SLOT_BYTES", str(64 << 10)),)),
    "accord-numpy-tcp": Implementation("accord", None, torch_tensors=False,
                                       env=(("ACCORD_TRANSPORT", "tcp"),
                                            ("ACCORD_SEGMENT_BYTES", "4096"))),
    "accord-torch": Implementation("accord", "gloo", torch_tensors=True,
                                   env=(("ACCORD_TRANSPORT", "tcp"),
                                        ("ACCORD_SMALL_MESSAGE_BYTES", "0"),
                                        ("ACCORD_SEGMENT_BYTES", "4096"))),
    # torch.distributed's own API with accord as its backend (init_process_group("accord"))
    "torch-accord": Implementation("torch.distributed", "accord", torch_tensors=True),
    "accord-mpi": Implementation("accord", "mpi", torch_tensors=False, mpiexec=True),
}

INIT = "<init_process_group>"
FINISH = "<barrier+destroy_process_group>"
PG_TIMEOUT_S = 15.0     # the process group's timeout in the children: a stuck collective raises
STALL_TIMEOUT_S = 25.0  # the parent gives up on a job when no message came for this long
JOB_TIMEOUT_S = 240.0   # and on any job after this long (a shared one runs several modules' scripts)
GRACE_S = 1.0           # after a failure, how long to collect the other ranks' reports
START_ATTEMPTS = 3      # init_process_group failures (a port taken meanwhile) are retried


class RunnerError(RuntimeError):
    """The job could not run at all (start-up failed on some rank)."""


@dataclass
class JobResult:
    impl: str
    world_size: int
    results: dict[str, list[Any]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    torch_imported: list[bool] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # slowest rank, per script
    jobs: int = 0


def wanted(world_size: int, impl: str) -> bool:
    """Whether the suite runs ``impl`` at ``world_size``: world size 3 (the algorithms' odd
    case) on accord's own transport with NumPy arrays only; backend mpi, the TCP transport
    and torch tensors (the same algorithms, other buffers) at 2 and 4, for the suite's time."""
    return not (impl in ("accord-mpi", "accord-numpy-tcp", "accord-torch", "torch-accord")
                and world_size == 3)


def names_for(impl: str) -> list[str]:
    spec = IMPLEMENTATIONS[impl]
    return scripts.names_for(on_torch_gloo=spec.is_torch_gloo, torch_tensors=spec.torch_tensors)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(impl: str, world_size: int, names: list[str] | None = None) -> JobResult:
    """Run ``names`` (default: every script of ``impl``) on ``world_size`` processes."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {impl!r}; one of {sorted(IMPLEMENTATIONS)}")
    todo = list(names if names is not None else names_for(impl))
    job = JobResult(impl, world_size)
    start_failures = 0
    while todo:
        job.jobs += 1
        done, failed, torch_flags, seconds = _run_once(impl, world_size, todo)
        if INIT in failed:
            # Most likely the free port was taken before rank 0 bound it: try another.
            start_failures += 1
            if start_failures < START_ATTEMPTS:
                continue
            raise RunnerError(f"{impl}, world size {world_size}: could not start "
                              f"({start_failures} attempts):\n{failed[INIT]}")
        job.results.update(done)
        job.seconds.update(seconds)
        job.failures.update(failed)
        if torch_flags:
            job.torch_imported = torch_flags
        remaining = [n for n in todo if n not in done and n not in failed]
        if len(remaining) == len(todo):  # no progress at all: do not loop forever
            for name in remaining:
                job.failures[name] = f"not run: the job made no progress\n{failed}"
            break
        todo = remaining
    return job


def _run_once(impl: str, world_size: int, names: list[str]) -> tuple[dict, dict, list[bool], dict]:
    """One process group running ``names``: (completed results, failures, torch flags,
    seconds per script)."""
    if IMPLEMENTATIONS[impl].mpiexec:
        return _run_once_mpi(impl, world_size, names)
    # torch's children fork from a server that imported torch already (about 1.5 s of CPU
    # less per process); the NumPy ones are spawned, as they must never import torch. (Imported
    # here: mpi_child.py imports this module where tests/ is not on sys.path.)
    import torch_forkserver

    spec = IMPLEMENTATIONS[impl]
    ctx = torch_forkserver.context() if spec.torch_tensors else mp.get_context("spawn")
    port = free_port()
    readers: dict[Connection, int] = {}
    procs = []
    patience = 0.0  # how long children may take to exit by themselves before they are killed
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, name=f"{impl}-rank{rank}", daemon=True,
                               args=(IMPLEMENTATIONS[impl], rank, world_size, port, names,
                                     dict(os.environ), writer))
            proc.start()
            writer.close()
            readers[reader] = rank
            procs.append(proc)
        outcome = _collect(impl, world_size, names, readers, procs)
        if not outcome[1]:
            patience = 5.0
        return outcome
    finally:
        _kill(procs, patience)
        for reader in readers:
            reader.close()


def mpiexec() -> str | None:
    """The mpiexec beside this interpreter (the ``mpi`` extra's MPICH) or on PATH, if mpi4py
    is installed too; else None."""
    import importlib.util
    import shutil
    if importlib.util.find_spec("mpi4py") is None:
        return None
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


class _MpiRank:
    """A rank of an mpiexec job, as ``_collect`` and ``_kill`` see a process: all ranks
    share the one mpiexec (ending it ends them)."""

    def __init__(self, popen: Any) -> None:
        self._popen = popen

    def join(self, timeout: float | None = None) -> None:
        import subprocess
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()


def _run_once_mpi(impl: str, world_size: int, names: list[str]) -> tuple[dict, dict, list[bool], dict]:
    """As ``_run_once``, the ranks started by ``mpiexec -n world_size``; each connects back
    to a local listener and says its rank."""
    import subprocess
    import tempfile
    from multiprocessing.connection import Listener

    launcher = mpiexec()
    if launcher is None:
        raise RunnerError("accord-mpi needs mpi4py and mpiexec: pip install 'accord[mpi]'")
    authkey = os.urandom(16)
    readers: dict[Connection, int] = {}
    procs: list[Any] = []
    with Listener(("127.0.0.1", 0), authkey=authkey) as listener, \
            tempfile.TemporaryFile("w+") as errors:
        listener._listener._socket.settimeout(30.0)  # type: ignore[attr-defined]
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, ACCORD_DIFF_ADDRESS=f"{listener.address[0]}:{listener.address[1]}",
                   ACCORD_DIFF_KEY=authkey.hex(), ACCORD_DIFF_IMPL=impl,
                   ACCORD_DIFF_NAMES=",".join(names), OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        popen = subprocess.Popen([launcher, "-n", str(world_size), sys.executable, "-m",
                                  "tests.differential.mpi_child"], env=env, cwd=root,
                                 stdout=subprocess.DEVNULL, stderr=errors)
        procs = [_MpiRank(popen)] * world_size
        patience = 0.0
        try:
            for _ in range(world_size):
                try:
                    conn = listener.accept()
                except OSError:
                    errors.seek(0)
                    return {}, {INIT: f"the mpiexec job did not start (exit code {popen.poll()}):\n"
                                      f"{errors.read()[-3000:]}"}, [], {}
                readers[conn] = conn.recv()
            outcome = _collect(impl, world_size, names, readers, procs)
            if not outcome[1]:
                patience = 10.0
            return outcome
        finally:
            _kill(procs[:1], patience)
            for reader in readers:
                reader.close()


def _collect(impl: str, world_size: int, names: list[str], readers: dict[Connection, int],
             procs: list) -> tuple[dict, dict, list[bool], dict]:
    per_rank: dict[str, dict[int, Any]] = {}
    errors: dict[str, dict[int, str]] = {}
    finished: dict[int, bool] = {}
    seconds: dict[str, float] = {}
    open_readers = dict(readers)
    start = last_message = time.monotonic()
    give_up_at: float | None = None
    why = ""
    while open_readers:
        now = time.monotonic()
        if give_up_at is not None and now >= give_up_at:
            break
        if now - last_message > STALL_TIMEOUT_S or now - start > JOB_TIMEOUT_S:
            why = (f"timed out: no message for {now - last_message:.0f} s, "
                   f"the job ran {now - start:.0f} s")
            break
        timeout = 0.5 if give_up_at is None else max(0.01, give_up_at - now)
        for reader in wait(list(open_readers), timeout=timeout):
            rank = open_readers[reader]
            try:
                kind, name, value, elapsed = reader.recv()
            except (EOFError, OSError):
                del open_readers[reader]
                if rank not in finished and not any(rank in e for e in errors.values()):
                    procs[rank].join(2)
                    index = _progress(names, per_rank, rank)
                    where = names[index] if index < len(names) else FINISH
                    errors.setdefault(where, {})[rank] = (
                        f"rank {rank} died without reporting (exit code {procs[rank].exitcode})")
                    give_up_at = give_up_at or time.monotonic() + GRACE_S
                continue
            last_message = time.monotonic()
            seconds[name] = max(seconds.get(name, 0.0), elapsed)
            if kind == "result":
                per_rank.setdefault(name, {})[rank] = value
            elif kind == "error":
                errors.setdefault(name, {})[rank] = value
                give_up_at = give_up_at or time.monotonic() + GRACE_S
            elif kind == "done":
                finished[rank] = value
    _blame_unfinished(names, per_rank, errors, finished, world_size, why)
    if FINISH in errors:
        # Leaving failed: collateral damage if a script failed, else report it on the last
        # script, so that a test shows it.
        finish = errors.pop(FINISH)
        if not errors:
            errors[names[-1]] = finish
    done = {name: [got[r] for r in range(world_size)] for name, got in per_rank.items()
            if len(got) == world_size and name not in errors}
    failed = {name: _describe(impl, world_size, name, by_rank) for name, by_rank in errors.items()}
    flags = [finished[r] for r in range(world_size)] if len(finished) == world_size else []
    return done, failed, flags, seconds


def _blame_unfinished(names: list[str], per_rank: dict[str, dict[int, Any]],
                      errors: dict[str, dict[int, str]], finished: dict[int, bool],
                      world_size: int, why: str) -> None:
    """Name the script each still-running rank was in when the job was given up.

    After a timeout, every such rank is blamed. After a failure, only ranks that had not got
    past the failing script are (a rank already further on is innocent: its script reruns).
    """
    position = {name: i for i, name in enumerate(names)} | {INIT: -1, FINISH: len(names)}
    first_failure = min((position[name] for name in errors), default=len(names))
    if not errors and not why:
        return
    if errors and not why:
        culprit = names[first_failure] if first_failure < len(names) else FINISH
        why = f"aborted after script {culprit!r} failed"
    for rank in range(world_size):
        if rank in finished or any(rank in e for e in errors.values()):
            continue
        index = _progress(names, per_rank, rank)
        if errors and index > first_failure:
            continue
        where = names[index] if index < len(names) else FINISH
        errors.setdefault(where, {})[rank] = f"rank {rank} was still running {where!r}: {why}"


def _progress(names: list[str], per_rank: dict[str, dict[int, Any]], rank: int) -> int:
    """Index of the first script ``rank`` has not reported a result for."""
    for index, name in enumerate(names):
        if rank not in per_rank.get(name, {}):
            return index
    return len(names)


def _describe(impl: str, world_size: int, name: str, by_rank: dict[int, str]) -> str:
    parts = [f"{impl}, world size {world_size}, script {name!r} failed on rank(s) "
             f"{sorted(by_rank)}:"]
    for rank in sorted(by_rank):
        parts.append(f"--- rank {rank} ---\n{by_rank[rank].rstrip()}")
    return "\n".join(parts)


def _kill(procs: list, patience: float) -> None:
    deadline = time.monotonic() + patience
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=3)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=3)


# -- in the child ------------------------------------------------------------------------------

def _child(spec: Implementation, rank: int, world_size: int, port: int, names: list[str],
           inherited: dict, conn: Connection) -> None:
    os.environ.clear()  # the parent's environment now, as a spawned child would start with
    os.environ.update(inherited)  # (a forked one has its server's, from the session's start)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1",
                      TORCH_CPP_LOG_LEVEL="ERROR")
    os.environ.update(dict(spec.env))
    run_scripts(spec, rank, world_size, names, conn)


def run_scripts(spec: Implementation, rank: int, world_size: int, names: list[str],
                conn: Connection) -> None:
    """In a child: join the group, run ``names``, report each result over ``conn``."""
    started = time.perf_counter()
    try:
        dist = importlib.import_module(spec.module)
        make = scripts.torch_factory() if spec.torch_tensors else scripts.numpy_factory()
        if spec.torch_tensors:
            import torch

            torch.set_num_threads(1)
        dist.init_process_group(backend=spec.backend, init_method="env://",
                                timeout=timedelta(seconds=PG_TIMEOUT_S))
    except BaseException:  # noqa: BLE001 — reported to the parent
        _abort(conn, INIT)
    conn.send(("started", INIT, None, time.perf_counter() - started))
    for name in names:
        started = time.perf_counter()
        try:
            script = scripts.BY_NAME[name]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = script.fn(dist, rank, world_size, make)
            scripts.check_plain(value)
        except BaseException:  # noqa: BLE001 — reported to the parent
            _abort(conn, name)
        conn.send(("result", name, value, time.perf_counter() - started))
    started = time.perf_counter()
    try:
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 — reported to the parent
        _abort(conn, FINISH)
    conn.send(("done", FINISH, "torch" in sys.modules, time.perf_counter() - started))
    conn.close()


def _abort(conn: Connection, name: str) -> None:
    """Report the current exception and leave at once: peers may be stuck with us."""
    try:
        conn.send(("error", name, traceback.format_exc(), 0.0))
        conn.close()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


# -- for the test modules ----------------------------------------------------------------------

def job_cache(names_for: Any = None) -> Any:
    """``get(impl, world_size)``: that job's results (``names_for(impl)`` or every script of
    the implementation), run at most once; a job that could not start fails each test that
    asks for it with its error, without being retried. Return it from a module fixture."""
    import pytest

    cache: dict[tuple[str, int], JobResult | RunnerError] = {}

    def get(impl: str, world_size: int) -> JobResult:
        if IMPLEMENTATIONS[impl].mpiexec and mpiexec() is None:
            pytest.skip(f"{impl} needs mpi4py and mpiexec (pip install 'accord[mpi]')")
        key = (impl, world_size)
        if key not in cache:
            try:
                cache[key] = run_job(impl, world_size, names_for(impl) if names_for else None)
            except RunnerError as exc:
                cache[key] = exc
        job = cache[key]
        if isinstance(job, RunnerError):
            pytest.fail(str(job), pytrace=False)
        return job

    return get


class SharedJobs:
    """A module's share of the session's jobs: for each of its ``pairs`` ((world size,
    implementation), as the modules list their jobs), one job runs the scripts of every
    module that shares that pair, one module's after another's (most of a job's time is
    starting its processes, seconds each where they import torch; its scripts take a
    fraction of that). ``tests/differential/conftest.py`` has every collected module that
    has one ``join()`` before any test runs. ``cache()`` is a ``job_cache``: a pair outside
    ``pairs``, or whose shared job was started before this module joined, gets a job of
    this module's own."""

    #: Session-wide: the modules that joined, in collection order, and the shared jobs run.
    members: list["SharedJobs"] = []
    jobs: dict[tuple[str, int], JobResult | RunnerError] = {}

    def __init__(self, names_for: Any, pairs: Any) -> None:
        self.names_for = names_for
        self.pairs = frozenset((impl, world_size) for world_size, impl in pairs)

    def join(self) -> None:
        if self not in SharedJobs.members:
            SharedJobs.members.append(self)

    def cache(self) -> Any:
        """The ``get(impl, world_size)`` of a module fixture."""
        import pytest

        own = job_cache(self.names_for)

        def get(impl: str, world_size: int) -> JobResult:
            key = (impl, world_size)
            if key not in self.pairs or (key in SharedJobs.jobs and self not in SharedJobs.members):
                return own(impl, world_size)
            if IMPLEMENTATIONS[impl].mpiexec and mpiexec() is None:
                pytest.skip(f"{impl} needs mpi4py and mpiexec (pip install 'accord[mpi]')")
            self.join()
            if key not in SharedJobs.jobs:
                names: list[str] = []
                for member in SharedJobs.members:
                    if key in member.pairs:
                        names += [n for n in member.names_for(impl) if n not in names]
                try:
                    SharedJobs.jobs[key] = run_job(impl, world_size, names)
                except RunnerError as exc:
                    SharedJobs.jobs[key] = exc
            job = SharedJobs.jobs[key]
            if isinstance(job, RunnerError):
                pytest.fail(str(job), pytrace=False)
            return job

        return get


def script_results(job: JobResult, name: str) -> list[Any]:
    """Per-rank results of one script; a child's failure fails the test with its traceback."""
    import pytest

    if name in job.failures:
        pytest.fail(job.failures[name], pytrace=False)
    assert name in job.results, f"{job.impl}: script {name!r} did not run"
    return job.results[name]
