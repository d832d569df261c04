"""Fault injection with real processes, over shared memory and over TCP: a rank killed
(SIGKILL) or frozen (SIGSTOP) at a random point of a loop of mixed collectives, a rank whose
own code raises, ranks that disagree or skip a collective, and a group destroyed or aborted
from another thread while a call waits. Every rank that takes part raises the right error,
naming the call and the culprit, promptly; nothing hangs; no segment and no process is left.

The children run fault_scenarios.py. Random choices (which rank, when) come from one seed per
session, ``ACCORD_FAULT_SEED`` (random when unset), and each assertion message shows it: rerun
with ``ACCORD_FAULT_SEED=<seed>`` to replay the same choices (process scheduling still varies).
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
import uuid

import pytest

from .fault_scenarios import unguarded_main
from .procs import ChildFailed, Job, Report, free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

TRANSPORTS = ["shm", "tcp"]
SEED = int(os.environ.get("ACCORD_FAULT_SEED") or random.SystemRandom().randrange(1 << 32))
#: Jobs per transport of the random-kill test: 25 with ``pytest --long`` (50 in all), else 1.
CHAOS_RUNS = 25 if os.environ.get("ACCORD_LONG_TESTS") == "1" else 1
#: Jobs per transport and victim of the random-freeze test (each waits out a timeout).
FREEZE_RUNS = 5 if os.environ.get("ACCORD_LONG_TESTS") == "1" else 1
#: The calls of fault_scenarios.mixed_round (what a failure in the loop may name).
LOOP_CALLS = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "barrier",
              "gather", "scatter"}
_MARKER = "ACCORD_FAULT_JOB"  # in every child's environment: finds any process left behind

# ---------------------------------------------------------------------------------------------
# the parent's helpers
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def fault_job(monkeypatch, tmp_path):
    """Start a fault-scenario Job (children get a marker in their environment and write
    flight-recorder dumps under tmp_path); at the end every job is closed and no process
    carrying the marker may be left, orphans included."""
    marker = f"{os.getpid()}-{uuid.uuid4().hex}"
    monkeypatch.setenv(_MARKER, marker)
    monkeypatch.setenv("ACCORD_FLIGHT_RECORDER_DIR", str(tmp_path / "flight-recorder"))
    jobs: list[Job] = []

    def start(world_size: int, name: str, unguarded: tuple[int, ...] = (), **params) -> Job:
        job = Job("fault", world_size, name=name, **params)
        for rank in unguarded:  # this rank's exception reaches the interpreter
            job.procs[rank] = job._mp.Process(
                target=unguarded_main, name=f"accord-rank-{rank}", daemon=True,
                args=("fault", rank, world_size, dict(name=name, **params), job.results[rank],
                      job.events))
        jobs.append(job)
        return job.start()

    yield start
    for job in jobs:
        job.close()
        assert all(proc.exitcode is not None for proc in job.procs.values()), \
            {rank: proc.exitcode for rank, proc in job.procs.items()}
    left = _processes_with(marker)
    assert not left, f"processes left behind: {left}"


def _processes_with(marker: str) -> dict[int, str]:
    """pid → command line of every live process whose environment carries ``marker`` (except
    multiprocessing's resource tracker, which the parent keeps for its whole life)."""
    found: dict[int, str] = {}
    needle = f"{_MARKER}={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as env:
                if needle not in env.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                cmdline = cmd.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "resource_tracker" not in cmdline and state != "Z":
            found[int(entry)] = cmdline
    return found


def rng_for(request) -> tuple[random.Random, str]:
    """This test's random choices, and how to replay them."""
    return random.Random(f"{SEED}/{request.node.name}"), f"ACCORD_FAULT_SEED={SEED}"


def check_transport(job: Job, transport: str) -> None:
    for rank, report in job.expect("initialized", timeout=30).items():
        assert report.info["shared"] == (transport == "shm"), (rank, report)


def finish(job: Job, codes: dict[int, int], why: str = "") -> None:
    """Release the children; each must exit by itself with the expected code (and is reaped)."""
    job.set("release")
    assert job.join(timeout=15) == codes, why


def call_of(report: Report, rank: int) -> tuple[str, int]:
    """(name, number) of the call a message starts with: 'all_reduce #12 on rank 2: …'."""
    match = re.match(rf"(\w+) #(\d+) on rank {rank}\b", report.message)
    assert match, report
    return match[1], int(match[2])


def names_rank(message: str, rank: int) -> bool:
    return re.search(rf"\brank {rank}\b", message) is not None


# ---------------------------------------------------------------------------------------------
# 1. kill -9 at a random point
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", range(CHAOS_RUNS))
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rank_killed_at_a_random_point_is_named_promptly(fault_job, request, transport,
                                                          run) -> None:
    """4 ranks loop mixed collectives, small and 1 MiB (group timeout 60 s); a random rank is
    SIGKILLed after a random delay. Every survivor raises PeerError naming it within 2 s; later
    calls raise at once; the survivors then leave normally; nothing is left in /dev/shm. The
    chaos run: CHAOS_RUNS jobs per transport, each with its own victim and moment."""
    rng, seed = rng_for(request)
    n = 4
    victim, delay = rng.randrange(n), rng.uniform(0.0, 1.0)
    why = f"{seed}: rank {victim} killed {delay:.3f} s into the loop ({transport})"
    job = fault_job(n, "mixed_loop", port=free_port(), transport=transport)
    check_transport(job, transport)
    job.expect("looping", timeout=30)
    time.sleep(delay)
    job.signal(victim, signal.SIGKILL)
    killed_at = time.time()
    survivors = [r for r in range(n) if r != victim]
    failures = job.expect("failure", ranks=survivors, timeout=15)
    for rank, report in failures.items():
        assert report.type_name == "PeerError", (why, report)
        assert report.is_a("ConnectionError") and report.is_a("RuntimeError"), (why, report)
        assert report.info["at"] - killed_at < 2.0, (why, report)
        assert call_of(report, rank)[0] in LOOP_CALLS, (why, report)
        assert names_rank(report.message, victim), (why, report)
    for key in ("again", "barrier"):  # the group stays broken: later calls raise at once
        for report in job.expect(key, ranks=survivors, timeout=10).values():
            assert report.type_name == "PeerError", (why, report)
            assert report.info["elapsed"] < 0.5, (why, report)
            assert names_rank(report.message, victim), (why, report)
    finish(job, {r: (-signal.SIGKILL if r == victim else 0) for r in range(n)}, why)


@pytest.mark.parametrize("run", range(CHAOS_RUNS))
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_survivors_of_a_random_kill_shrink_and_go_on(fault_job, request, transport, run) -> None:
    """The chaos run again, then the survivors go on: they shrink the default group by the
    ranks they saw go (every one names the victim alone), and run 3 more rounds of mixed
    collectives on the 3 of them, every result checked against its closed form. The victim
    is any rank but 0, which hosts the store."""
    rng, seed = rng_for(request)
    n = 4
    victim, delay = rng.randrange(1, n), rng.uniform(0.0, 1.0)
    why = f"{seed}: rank {victim} killed {delay:.3f} s into the loop ({transport})"
    job = fault_job(n, "mixed_loop", port=free_port(), transport=transport, go_on=3)
    check_transport(job, transport)
    job.expect("looping", timeout=30)
    time.sleep(delay)
    job.signal(victim, signal.SIGKILL)
    survivors = [r for r in range(n) if r != victim]
    job.expect("failure", ranks=survivors, timeout=15)
    for rank, report in job.expect("continued", ranks=survivors, timeout=30).items():
        assert report.ok and report.info["lost"] == [victim], (why, report)
        assert report.info["size"] == 3 and report.info["rank"] == survivors.index(rank), (why, report)
        assert report.info["shrink_s"] < 1.0, (why, report)
    finish(job, {r: (-signal.SIGKILL if r == victim else 0) for r in range(n)}, why)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rank_killed_while_a_survivor_is_frozen_is_named(fault_job, request, transport) -> None:
    """3 ranks loop a 1 MiB all_reduce (shm: single-copy reads); rank 1 pauses 50 ms before
    each, so the others are always waiting for it in the next. Rank 1 is frozen, rank 2
    killed while it is, then rank 1 resumed: it finds rank 2's round published and reads its
    memory (shm) or its socket (tcp). Both survivors must say that rank 2 is gone, in a
    message about their all_reduce."""
    rng, seed = rng_for(request)
    delay = rng.uniform(0.0, 0.3)
    why = f"{seed}: delay {delay:.3f} s ({transport})"
    job = fault_job(3, "mixed_loop", port=free_port(), transport=transport, large_only=True,
                    laggard=1, lag=0.05)
    check_transport(job, transport)
    job.expect("looping", timeout=30)
    time.sleep(delay)
    job.signal(1, signal.SIGSTOP)
    try:
        time.sleep(0.3)
        job.signal(2, signal.SIGKILL)
        killed_at = time.time()
        time.sleep(0.3)
    finally:
        os.kill(job.pid(1), signal.SIGCONT)
    failures = job.expect("failure", ranks=[0, 1], timeout=15)
    for rank, report in failures.items():
        assert report.type_name == "PeerError", (why, report)
        assert report.info["at"] - killed_at < 2.0, (why, report)
        assert call_of(report, rank)[0] == "all_reduce", (why, report)
        assert names_rank(report.message, 2), (why, report)
    finish(job, {0: 0, 1: 0, 2: -signal.SIGKILL}, why)


# ---------------------------------------------------------------------------------------------
# 2. SIGSTOP: a frozen rank
# ---------------------------------------------------------------------------------------------
#: How long a timed-out rank waits for the store to build its stuck report
#: (accord.diagnostics.progress.STORE_WAIT_S): a frozen rank 0 also freezes the TCPStore it hosts.
STORE_WAIT_S = 2.0


@pytest.mark.parametrize("run", range(FREEZE_RUNS))
@pytest.mark.parametrize("victim", ["last", "store_host"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_frozen_rank_times_out_the_others(fault_job, request, transport, victim, run, long_run) -> None:
    """3 ranks loop mixed collectives with a 2.5 s group timeout; one is SIGSTOPped at a
    random point. The survivors raise DistTimeoutError (or a PeerError relaying such a timeout
    from the other survivor) naming their call and the frozen rank, 2.5 s (+ a margin) after
    the stop (when the frozen rank is rank 0, which hosts the store, the stuck report waits
    for it at most STORE_WAIT_S more). Then the frozen rank is resumed: its group is broken
    too, and everybody leaves."""
    if transport == "tcp" and victim == "store_host" and not long_run:
        pytest.skip("the store host frozen over TCP: the shm variant runs the same report; pytest --long")
    rng, seed = rng_for(request)
    n, timeout = 3, 2.5
    frozen = n - 1 if victim == "last" else 0
    limit = timeout + (STORE_WAIT_S if frozen == 0 else 0.0)  # when the survivors must raise
    delay = rng.uniform(0.0, 1.0)
    why = f"{seed}: rank {frozen} stopped {delay:.3f} s into the loop ({transport})"
    job = fault_job(n, "mixed_loop", port=free_port(), transport=transport, timeout=timeout)
    check_transport(job, transport)
    job.expect("looping", timeout=30)
    time.sleep(delay)
    job.signal(frozen, signal.SIGSTOP)
    stopped_at = time.time()
    survivors = [r for r in range(n) if r != frozen]
    try:
        try:
            failures = job.expect("failure", ranks=survivors, timeout=limit + 2.0)
        except ChildFailed as exc:
            raise AssertionError(f"{why}: no error on the survivors within {limit} s + 2 s "
                                 f"of the SIGSTOP: {exc}") from None
    finally:
        os.kill(job.pid(frozen), signal.SIGCONT)
    timeouts = 0
    for rank, report in failures.items():
        if report.type_name == "DistTimeoutError":
            timeouts += 1
            assert report.is_a("TimeoutError") and report.is_a("RuntimeError"), (why, report)
        else:  # the other survivor timed out first and told this one
            assert report.type_name == "PeerError", (why, report)
            assert "reported a failure" in report.message, (why, report)
            assert f"in {timeout:g} s" in report.message, (why, report)
        assert call_of(report, rank)[0] in LOOP_CALLS, (why, report)
        assert names_rank(report.message, frozen), (why, report)
        assert timeout - 0.5 <= report.info["at"] - stopped_at < limit + 1.5, (why, report)
    assert timeouts >= 1, (why, failures)
    resumed = job.expect("failure", ranks=[frozen], timeout=10)[frozen]
    assert resumed.type_name in ("PeerError", "DistTimeoutError"), (why, resumed)
    for key in ("again", "barrier"):
        for report in job.expect(key, timeout=10).values():
            assert report.type_name == "PeerError" and report.info["elapsed"] < 0.5, (why, report)
    finish(job, {r: 0 for r in range(n)}, why)


# ---------------------------------------------------------------------------------------------
# 3. a rank whose own code raises
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_uncaught_exception_in_one_rank_releases_the_others(fault_job, request, capfd,
                                                               transport) -> None:
    """3 ranks loop mixed collectives (group timeout 60 s); between two rounds a random
    rank's own code raises KeyError, which nothing catches: the interpreter prints the
    traceback and exits with code 1 (accord's exit hook says GOODBYE). The others raise
    PeerError naming it within 2 s, not at the timeout."""
    rng, seed = rng_for(request)
    n = 3
    culprit, raise_at = rng.randrange(n), rng.randrange(1, 30)
    why = f"{seed}: rank {culprit} raises before round {raise_at} ({transport})"
    job = fault_job(n, "mixed_loop", unguarded=(culprit,), port=free_port(),
                    transport=transport, culprit=culprit, raise_at=raise_at)
    check_transport(job, transport)
    raised_at = job.expect("raising", ranks=[culprit], timeout=30)[culprit].info["at"]
    job.expected_dead.add(culprit)
    survivors = [r for r in range(n) if r != culprit]
    failures = job.expect("failure", ranks=survivors, timeout=15)
    for rank, report in failures.items():
        assert report.type_name == "PeerError", (why, report)
        assert report.info["at"] - raised_at < 2.0, (why, report)
        assert call_of(report, rank)[0] in LOOP_CALLS, (why, report)
        assert names_rank(report.message, culprit), (why, report)
    for key in ("again", "barrier"):
        for report in job.expect(key, ranks=survivors, timeout=10).values():
            assert report.type_name == "PeerError" and report.info["elapsed"] < 0.5, (why, report)
    finish(job, {r: (1 if r == culprit else 0) for r in range(n)}, why)
    assert "KeyError: 'learning_rate'" in capfd.readouterr().err, why


# ---------------------------------------------------------------------------------------------
# 4, 5. ranks that disagree
# ---------------------------------------------------------------------------------------------
#: What each disagreement must show in the messages: both sides of it.
MISMATCH_DETAILS = {
    "op": ("broadcast #3", "all_reduce #3"),
    "dtype": ("float32", "int64"),
    "count": ("4 elements", "8 elements"),
    "root": ("root 0", "root 1"),
    "skip": ("barrier #3", "all_reduce #3"),
}
RELAYED = re.compile(r"rank \d+ found that")

def check_mismatch(job: Job, case: str, ranks: list[int], may_return: set[int], why: str) -> None:
    """Every rank's first error (in call #3, or in the next call for ranks in ``may_return``)
    is CollectiveMismatchError, or the PeerError of a rank that entered #3 after another had
    already found the mismatch and broken the group (a race); each names its call and both
    sides of the disagreement; rank 1 and at least one other raise the mismatch error."""
    calls = job.expect("call", ranks=ranks, timeout=20)
    nexts = job.expect("next", ranks=[r for r in ranks if not (case == "skip" and r == 1)],
                       timeout=20)
    values = {r: rep.info["values"] for r, rep in job.expect("values", ranks=ranks).items()}
    why = f"{why}; values after call #3: {values}"
    mismatches = 0
    for rank in ranks:
        report = calls[rank]
        if report.ok:
            assert rank in may_return, (why, report)
            report = nexts[rank]  # it learns at its next call
            assert not report.ok, (why, report)
        else:
            assert call_of(report, rank)[1] == 3, (why, report)
        if report.type_name == "CollectiveMismatchError":
            mismatches += 1
            assert report.is_a("RuntimeError"), (why, report)
        else:
            assert report.type_name == "PeerError", (why, report)
            assert "cannot be used since" in report.message and RELAYED.search(report.message), \
                (why, report)
            assert rank != 1, (why, report)
        for detail in MISMATCH_DETAILS[case]:
            assert detail in report.message, (why, detail, report)
        assert report.info["elapsed"] < 5.0, (why, report)
    assert calls[1].type_name == "CollectiveMismatchError" or 1 in may_return, (why, calls[1])
    assert mismatches >= 2, (why, calls, nexts)
    for report in nexts.values():  # the group is broken: later calls raise at once
        assert not report.ok and report.info["elapsed"] < 0.5, (why, report)
    for report in job.expect("after", ranks=ranks, timeout=10).values():
        assert report.type_name == "PeerError" and report.info["elapsed"] < 0.5, (why, report)


@pytest.mark.parametrize("case", ["op", "dtype", "count", "root"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ranks_that_disagree_raise_a_mismatch(fault_job, transport, case) -> None:
    """Call #3 of 3 ranks: rank 1 disagrees with ranks 0 and 2 on the operation (broadcast
    against all_reduce), the dtype (float32 against int64), the count (8 against 4) or the
    root of a broadcast (1 against 0; rank 1 starts it 0.2 s after the others, which makes
    the outcome deterministic). Every rank raises within seconds (group timeout 60 s). In a
    broadcast a rank may return, having talked only with ranks that agree with it (a root
    sends, rank 2 reads from rank 0): it must then learn of the mismatch at its next call."""
    late = {"late_rank": 1, "late_s": 0.2} if case == "root" else {}
    job = fault_job(3, "mismatch", port=free_port(), transport=transport, case=case, **late)
    check_transport(job, transport)
    check_mismatch(job, case, [0, 1, 2], {0, 1, 2} if case == "root" else set(),
                   f"{case} ({transport})")
    finish(job, {0: 0, 1: 0, 2: 0})


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rank_that_skips_a_collective_is_caught_at_once(fault_job, transport) -> None:
    """Rank 1 skips the third all_reduce and calls the barrier that follows it: its barrier
    #3 meets the others' all_reduce #3. Every rank raises within seconds, not at the timeout
    (60 s): CollectiveMismatchError naming barrier #3 and all_reduce #3 on every rank over
    shared memory; over TCP rank 1 and at least one other raise it, and a rank that reaches
    all_reduce #3 after the others broke the group may raise the PeerError that carries the
    same mismatch ('… cannot be used since rank 1 found that barrier #3 on rank 1: rank 2
    called all_reduce #3 …'), as check_mismatch allows."""
    job = fault_job(3, "mismatch", port=free_port(), transport=transport, case="skip")
    check_transport(job, transport)
    check_mismatch(job, "skip", [0, 1, 2], set(), f"skip ({transport})")
    finish(job, {0: 0, 1: 0, 2: 0})


# ---------------------------------------------------------------------------------------------
# 6. destroy / abort from another thread
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stopper", ["destroy", "abort"])
@pytest.mark.parametrize("blocked", ["recv", "all_reduce"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_destroy_or_abort_from_another_thread_ends_a_blocked_call(fault_job, transport, blocked,
                                                                  stopper) -> None:
    """Rank 0 blocks in a recv or an all_reduce that cannot complete; 0.3 s later another of
    its threads calls destroy_process_group() or the group's abort(). The blocked call raises
    PeerError within 1 s; the peers' pending calls (a recv from rank 0, a barrier) raise
    PeerError naming rank 0 within 2 s; every rank then leaves normally."""
    why = f"{transport}, {blocked}, {stopper}"
    job = fault_job(3, "abort_from_thread", port=free_port(), transport=transport,
                    blocked=blocked, stopper=stopper)
    check_transport(job, transport)
    stopper_report = job.expect("stopper", ranks=[0], timeout=20)[0]
    assert "error" not in stopper_report.info and not stopper_report.info["alive"], \
        (why, stopper_report)
    stopped_at = stopper_report.info["at"]
    assert stopper_report.info["returned"] - stopped_at < 1.0, (why, stopper_report)
    report = job.expect("blocked", ranks=[0], timeout=5)[0]
    assert report.type_name == "PeerError", (why, report)
    call = "recv from rank 1 (tag 5)" if blocked == "recv" else "all_reduce #2"
    assert report.message.startswith(f"{call} on rank 0"), (why, report)
    assert report.info["at"] - stopped_at < 1.0, (why, report)
    for pending in job.expect("pending", ranks=[1, 2], timeout=10).values():
        assert pending.type_name == "PeerError", (why, pending)
        assert names_rank(pending.message, 0), (why, pending)
        assert pending.info["at"] - stopped_at < 2.0, (why, pending)
    job.set("release")
    job.expect("destroyed", timeout=10)
    finish(job, {0: 0, 1: 0, 2: 0}, why)


# ---------------------------------------------------------------------------------------------
# leaving a subgroup releases the members waiting in it
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("blocked", ["all_reduce", "recv"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_destroying_a_subgroup_releases_its_members_at_once(fault_job, transport, blocked) -> None:
    """Rank 1 destroys a subgroup while rank 0 waits in a call on it (an all_reduce rank 1
    never makes, or a recv from rank 1) and goes on working: rank 0 raises PeerError naming
    rank 1 within a second (the group timeout is 30 s), and the world group still works."""
    why = f"{transport}, {blocked}"
    job = fault_job(3, "leave_subgroup", port=free_port(), transport=transport, blocked=blocked)
    check_transport(job, transport)
    for report in job.expect("used", timeout=30).values():
        assert report.ok and report.info["total"] == 3.0, (why, report)
        assert report.info["shared"] == (transport == "shm"), (why, report)
    left = job.expect("left", ranks=[1], timeout=20)[1]
    assert left.info["returned"] - left.info["at"] < 1.0, (why, left)
    report = job.expect("blocked", ranks=[0], timeout=10)[0]
    assert report.type_name == "PeerError", (why, report)
    assert names_rank(report.message, 1) and "left" in report.message, (why, report)
    assert report.info["at"] - left.info["at"] < 1.0, (why, report)
    job.set("proceed")
    for works in job.expect("world works", timeout=20).values():
        assert works.ok, (why, works)
    job.set("release")
    job.expect("destroyed", timeout=10)
    finish(job, {0: 0, 1: 0, 2: 0}, why)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_destroyed_groups_release_their_descriptors_at_once(fault_job, transport) -> None:
    """100 cycles of new_group + all_reduce + destroy with the garbage collector off leave no
    descriptor and no shared-memory mapping behind (before the fix: 30 extra per 200 cycles,
    each a destroyed group's segment, until the collector ran)."""
    job = fault_job(2, "group_churn", port=free_port(), transport=transport)
    for rank, report in job.expect("counts", timeout=60).items():
        assert report.ok, (transport, rank, report)
        before, after = report.info["before"], report.info["after"]
        assert after[0] <= before[0] and after[1] <= before[1], (transport, rank, report)
    finish(job, {0: 0, 1: 0}, transport)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_survivors_that_leave_at_once_do_not_hide_the_rank_that_died(fault_job, request,
                                                                     transport) -> None:
    """As above, but each survivor destroys its group and ends as soon as its call fails (what
    a program does when the exception ends it): the survivors still waiting must name the
    killed rank (the root cause), not a survivor that left before them."""
    rng, seed = rng_for(request)
    n = 4
    victim, delay = rng.randrange(n), rng.uniform(0.0, 1.0)
    why = f"{seed}: rank {victim} killed {delay:.3f} s into the loop ({transport})"
    job = fault_job(n, "mixed_loop", port=free_port(), transport=transport, leave_at_once=True)
    check_transport(job, transport)
    job.expect("looping", timeout=30)
    time.sleep(delay)
    job.signal(victim, signal.SIGKILL)
    survivors = [r for r in range(n) if r != victim]
    failures = job.expect("failure", ranks=survivors, timeout=15)
    for rank, report in failures.items():
        assert report.type_name == "PeerError", (why, report)
        assert names_rank(report.message, victim), (why, report)
    job.expect("destroyed", ranks=survivors, timeout=15)
    assert job.join(timeout=15) == {r: (-signal.SIGKILL if r == victim else 0) for r in range(n)}, why
