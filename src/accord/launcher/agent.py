"""The launcher's main loop on one node: meet the other nodes, run the workers, watch, restart.

Owns: the order of an attempt (join → start the local workers (``local_workers``) → watch
them and the other nodes, a failed worker replaced in place with --replace-workers → stop →
agree on a verdict → restart, finish or report), elasticity's decisions on one node (with
--nnodes MIN:MAX: stop every node's workers when another node is lost, or when nodes wait to
join with room and a restart left; a node that came late waits for the running attempt to
end, as a spare when the job has MAX nodes), starting this launcher's heartbeat, and
the job file that tells ``accord top`` where each attempt's workers meet (``job_files``). Signals
are ``shutdown``'s. Must not know the command line syntax (``options``) or the store keys
(``nodes``, ``rounds``, ``liveness``).
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass

from .. import auth, config
from ..errors import DistStoreError
from ..rendezvous import job_files
from ..store.tcp_store import TCPStore
from .liveness import Heartbeat, Liveness, beat_interval
from .local_workers import LocalWorkers
from .nodes import LaunchError, Rendezvous, RoundInfo, Waiting, open_store
from .options import LaunchConfig
from .output import Console, RunDir
from .procs import LocalGroup, Reaper, WorkerExit
from .report import Failure, format_report
from .rounds import (
    FAILED,
    INTERRUPTED,
    RESIZE,
    RESTART,
    STOPPED,
    SUCCEEDED,
    NodeStatus,
    RoundChannel,
    Verdict,
    await_verdict,
    decide,
    leave,
)
from .shutdown import Interrupted, Shutdown

# How long a failure that blames another rank waits for that rank's own exit (see
# ``Agent._await_root_cause``).
_ROOT_CAUSE_GRACE_S = 3.0


def _count(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


@dataclass
class _Job:
    """What every attempt of this launcher uses: the rendezvous, the other launchers'
    liveness (None on a job of one node), whether this launcher hosts the store, the reaper
    and the run directory."""

    rendezvous: Rendezvous
    liveness: Liveness | None
    hosting: bool
    reaper: Reaper
    rundir: RunDir


class Agent:
    """accordrun on one node."""

    def __init__(
        self,
        cfg: LaunchConfig,
        console: Console | None = None,
        local_rank_arg: bool = False,
        environ: dict[str, str] | None = None,
        made_secret: bool = False,
    ) -> None:
        self.cfg = cfg
        self.console = console or Console()
        self.local_rank_arg = local_rank_arg
        self.environ = dict(os.environ if environ is None else environ)
        self.host = socket.gethostname()
        self.shutdown = Shutdown()
        self.lost_after = config.env_float(config.HEARTBEAT_TIMEOUT, minimum=0.1)
        self.name = uuid.uuid4().hex[:16]  # this launcher's heartbeat (liveness)
        self.made_secret = made_secret  # the job's secret is this launcher's: its job file has it
        self.started = time.time()

    def run(self) -> int:
        """Run the job; the exit code (0 success, 1 failure) — the report is already printed."""
        self.shutdown.install(self.cfg.signals)
        reaper, rundir, store = Reaper(), RunDir(self.cfg.log_dir, self.cfg.run_id), None
        code = 1
        try:
            store, hosting = open_store(self.cfg)
            code = self._attempts(store, hosting, reaper, rundir)
        except Interrupted as exc:
            self.console.say(f"accordrun: stopped by {exc}.")
        except (LaunchError, ValueError) as exc:
            self.console.say(f"accordrun: error: {exc}")
        except DistStoreError as exc:
            self.console.say(self._lost_store(exc))
        finally:
            self.shutdown.restore()
            job_files.remove(self.cfg.run_id, os.getpid())
            reaper.close()
            if store is not None:
                store.close()
            if code == 0:
                rundir.cleanup()
        return code

    def _lost_store(self, exc: Exception) -> str:
        where = f"{self.cfg.rdzv_host}:{self.cfg.rdzv_port or '?'}"
        return (
            f"accordrun: lost the job's store at {where} ({exc}). The accordrun hosting it "
            f"(node 0, or the --rdzv-endpoint host) may have died; this node's workers were "
            f"stopped."
        )

    def _attempts(self, store: TCPStore, hosting: bool, reaper: Reaper, rundir: RunDir) -> int:
        rendezvous = Rendezvous(store, self.cfg, self.shutdown.check, hosting, self.name)
        heartbeat, liveness = None, None
        try:
            if self.cfg.max_nodes > 1:
                every = beat_interval(self.lost_after)
                heartbeat = Heartbeat(rendezvous.store.clone(), self.name, every)
                liveness = Liveness(rendezvous.store, self.name, self.lost_after)
            return self._rounds(_Job(rendezvous, liveness, hosting, reaper, rundir))
        finally:
            if heartbeat is not None:
                heartbeat.close()
            rendezvous.close()

    def _rounds(self, job: _Job) -> int:
        restart, expected, ahead = 0, None, 0
        while True:
            joined = job.rendezvous.join(restart, expected, ahead)
            if isinstance(joined, Waiting):
                verdict = self._wait_to_join(job, joined)
                if verdict.outcome != RESTART:
                    others = self._waiters(job, joined.restart, joined.nnodes)
                    leave(job.rendezvous.store, joined.restart, job.hosting, verdict.survivors + others)
                    return self._ended_without_us(verdict)
                restart, expected = verdict.restarts(joined.restart) + 1, verdict.nnodes
                ahead = verdict.survivors
                continue
            info = joined
            channel = RoundChannel(job.rendezvous.store, info, job.liveness, self.shutdown.check)
            verdict = self._attempt(info, channel, job)
            if verdict.outcome != RESTART:
                waiters = self._waiters(job, info.restart, info.nnodes)
                channel.leave(job.hosting, expected=verdict.survivors + waiters)
                return self._finish(verdict, verdict.restarts(info.restart))
            restart, expected, ahead = verdict.restarts(info.restart) + 1, verdict.nnodes, 0
            self.console.say(self._restarting(verdict, info))

    def _restarting(self, verdict: Verdict, info: RoundInfo) -> str:
        restart = verdict.restarts(info.restart) + 1
        if verdict.root is not None:
            head = f"attempt {info.restart} failed: {verdict.root.summary()}"
        else:
            head = f"attempt {info.restart} stopped: {verdict.detail}"
        head = head if head.endswith((".", "?")) else f"{head}."
        nodes = (
            "" if verdict.nnodes == info.nnodes else f", on {_count(verdict.nnodes)} instead of {info.nnodes}"
        )
        return (
            f"accordrun: {head} Restarting every worker (restart {restart} of "
            f"{self.cfg.max_restarts}){nodes}."
        )

    def _wait_to_join(self, job: _Job, waiting: Waiting) -> Verdict:
        """This node came after attempt ``waiting.restart`` started: wait for it to end. Its
        nodes restart to take this one in when they have room and restarts left; a node that
        finds no room waits as a spare, for a restart that has."""
        cfg, restart, nnodes = self.cfg, waiting.restart, waiting.nnodes
        if restart >= cfg.max_restarts and not job.hosting:  # the host stays: it serves the store
            raise LaunchError(
                f"this node came after attempt {restart} started with {_count(nnodes)}, and the job "
                f"has no restart left to take it in (--max-restarts {cfg.max_restarts})."
            )
        if nnodes < cfg.max_nodes:
            said = (
                f"accordrun: attempt {restart} runs with {_count(nnodes)} (--nnodes {cfg.nnodes}): "
                f"this node waits for it to restart and take it in."
            )
        else:
            said = (
                f"accordrun: attempt {restart} runs with {_count(nnodes)}, the most --nnodes "
                f"{cfg.nnodes} allows: this node waits as a spare, to join a restart with room."
            )
        return await_verdict(
            job.rendezvous.store, restart, self.shutdown.check, lambda: self.console.say(said)
        )

    def _ended_without_us(self, verdict: Verdict) -> int:
        if verdict.outcome == SUCCEEDED:
            self.console.say(f"accordrun: job {self.cfg.run_id} succeeded without this node.")
            return 0
        why = verdict.root.summary() if verdict.root else verdict.detail
        self.console.say(
            f"accordrun: job {self.cfg.run_id} ended ({verdict.outcome}: {why}) before this node could join."
        )
        return 1

    def _waiters(self, job: _Job, restart: int, nnodes: int, proven: bool = False) -> int:
        """How many nodes wait for attempt ``restart`` (of ``nnodes`` nodes) to end, alive
        (``proven``: seen beating while we watched)."""
        liveness = job.liveness
        agents = [node.agent for node in job.rendezvous.waiting(restart, nnodes)] if liveness else []
        if liveness is None or not agents:
            return 0
        liveness.observe(agents)
        if proven:
            return sum(liveness.proven(agent) for agent in agents)
        return sum(not liveness.lost(agent) for agent in agents)

    def _attempt(self, info: RoundInfo, channel: RoundChannel, job: _Job) -> Verdict:
        workers = LocalWorkers(
            self.cfg, info, self.environ, self.console, job.rundir, job.reaper, self.local_rank_arg
        )
        self.shutdown.group = workers.group
        self._publish_job(info)
        try:
            workers.start()
            status = self._watch(workers, channel, info, job)
        finally:
            workers.stop()
            self.shutdown.group = None
        channel.publish(status)
        statuses = channel.gather()
        waiting = self._waiters(job, info.restart, info.nnodes)
        mine = decide(info, statuses, self.cfg, self.lost_after, waiting, channel.replacements())
        return channel.settle(mine)

    def _publish_job(self, info: RoundInfo) -> None:
        """Write where this attempt's workers meet (their store), for ``accord top``."""
        secret = auth.SECRET.raw() if self.made_secret else None
        job = job_files.JobFile(
            self.cfg.run_id, os.getpid(), self.host, info.master_addr, info.master_port,
            info.restart, secret, self.started,
        )  # fmt: skip
        job_files.write(job)

    def _watch(self, workers: LocalWorkers, channel: RoundChannel, info: RoundInfo, job: _Job) -> NodeStatus:
        """Until the local workers end, one fails (and is not replaced in place), another node
        fails or is lost, nodes wait to join with room for them, or a signal comes."""
        group, watching = workers.group, job.liveness is not None
        next_look = time.monotonic() + (job.liveness.every if job.liveness else 0.0)
        while True:
            event = group.next_exit(self.cfg.monitor_interval)
            if self.shutdown.signum is not None:  # exits after a forwarded signal are its doing
                if watching:
                    channel.raise_alarm(INTERRUPTED)
                name = signal.Signals(self.shutdown.signum).name
                self.shutdown.handled = True
                return self._status(info, INTERRUPTED, [], name)
            if event is not None and event.returncode != 0:
                first = workers.failure(event)
                if self.cfg.replace_workers and not channel.stopped() and workers.replace(first, channel):
                    continue
                failures = [first, *(workers.failure(e) for e in self._queued(group) if e.returncode)]
                failures = workers.reported(failures)  # + the replaced ones, when these are their fallout
                self._await_root_cause(workers, failures)
                if watching and channel.stop_reason() == RESIZE:
                    return self._status(info, STOPPED, [], "stopped to take in new nodes")
                if watching:
                    channel.raise_alarm(FAILED)
                failures.sort(key=lambda f: (f.caused_by_a_peer(), f.time))
                return self._status(info, FAILED, failures)
            if event is not None and not group.running():
                return self._status(info, SUCCEEDED, [])
            if watching:
                if channel.stopped():
                    return self._status(info, STOPPED, [])
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + (job.liveness.every if job.liveness else 0.0)
                    change = self._membership(channel, info, job)
                    if change is not None:
                        return change

    def _membership(self, channel: RoundChannel, info: RoundInfo, job: _Job) -> NodeStatus | None:
        """A lost node, or nodes waiting to join while there is room and a restart left: the
        status to stop with (every node is told); None: nothing changed."""
        lost = channel.lost_nodes()
        if lost:
            channel.raise_alarm(STOPPED)
            return self._status(info, STOPPED, [], f"lost node(s) {lost}")
        cfg = self.cfg
        room = info.nnodes < cfg.max_nodes and info.restart + channel.replacements() < cfg.max_restarts
        if (
            room
            and self._waiters(job, info.restart, info.nnodes, proven=True)
            and not channel.anyone_finished()
        ):
            channel.raise_alarm(RESIZE)
            return self._status(info, RESIZE, [], "nodes wait to join")
        return None

    def _await_root_cause(self, workers: LocalWorkers, failures: list[Failure]) -> None:
        """While every failure so far blames a peer ('rank 1 raised ValueError …'), the rank
        it blames is usually still on its way out (printing its traceback, writing its error
        file): wait up to ``_ROOT_CAUSE_GRACE_S`` for more exits, so that the report names the
        rank that failed first rather than the first to exit."""
        deadline = time.monotonic() + _ROOT_CAUSE_GRACE_S
        while all(f.caused_by_a_peer() for f in failures) and workers.group.running():
            left = deadline - time.monotonic()
            if left <= 0 or self.shutdown.signum is not None:
                return
            event = workers.group.next_exit(min(left, 0.05))
            if event is not None and event.returncode:
                failures.append(workers.failure(event))

    @staticmethod
    def _queued(group: LocalGroup) -> list[WorkerExit]:
        exits = []
        while (event := group.next_exit(0.0)) is not None:
            exits.append(event)
        return exits

    def _status(self, info: RoundInfo, outcome: str, failures: list[Failure], detail: str = "") -> NodeStatus:
        return NodeStatus(info.node_rank, self.host, outcome, failures, detail)

    def _finish(self, verdict: Verdict, restarts: int) -> int:
        if verdict.outcome == SUCCEEDED:
            return 0
        if verdict.outcome == INTERRUPTED:
            self.console.say(f"accordrun: job {verdict.detail}; every worker was stopped.")
            return 1
        if verdict.root is None:
            self.console.say(f"accordrun: the job failed: {verdict.detail}")
            return 1
        footer = (
            f"accordrun: job {self.cfg.run_id} failed after {restarts} restart(s) "
            f"(--max-restarts {self.cfg.max_restarts}); first failure: "
            f"{verdict.root.summary()}"
        )
        if verdict.detail:
            footer += f"\naccordrun: the job cannot go on: {verdict.detail}."
        self.console.say(format_report(self.cfg.entrypoint, verdict.root, verdict.others, footer))
        return 1
