"""The launcher's main loop on one node: meet the other nodes, run the workers, watch, restart.

Owns: the order of an attempt (join → start the local workers with their environment and
error files → watch them and the other nodes → stop → agree on a verdict → restart, finish or
report) and turning worker exits into failures; the signals it handles are ``shutdown``'s.
Must not know the command line syntax (``options``) or the store keys (``nodes``, ``rounds``).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from typing import BinaryIO, cast

from .. import config
from ..errors import DistStoreError
from ..store.tcp_store import TCPStore
from .env import JobFacts, worker_env
from .nodes import LaunchError, Rendezvous, RoundInfo, open_store
from .options import LaunchConfig
from .output import Console, OutputPump, RunDir, line_prefix, stream_targets
from .procs import LocalGroup, Reaper, WorkerExit, worker_command
from .report import Failure, format_report, make_failure
from .rounds import (
    FAILED,
    INTERRUPTED,
    RESTART,
    STOPPED,
    SUCCEEDED,
    NodeStatus,
    RoundChannel,
    Verdict,
    decide,
)
from .shutdown import Interrupted, Shutdown

# How long a failure that blames another rank waits for that rank's own exit (see
# ``Agent._await_root_cause``).
_ROOT_CAUSE_GRACE_S = 3.0


class Agent:
    """accordrun on one node."""

    def __init__(
        self,
        cfg: LaunchConfig,
        console: Console | None = None,
        local_rank_arg: bool = False,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.console = console or Console()
        self.local_rank_arg = local_rank_arg
        self.environ = dict(os.environ if environ is None else environ)
        self.host = socket.gethostname()
        self.shutdown = Shutdown()
        self.lost_after = config.env_float(config.HEARTBEAT_TIMEOUT, minimum=0.1)

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
        rendezvous = Rendezvous(store, self.cfg, self.shutdown.check, hosting)
        try:
            return self._rounds(rendezvous, hosting, reaper, rundir)
        finally:
            rendezvous.close()

    def _rounds(self, rendezvous: Rendezvous, hosting: bool, reaper: Reaper, rundir: RunDir) -> int:
        restart, expected = 0, None
        while True:
            info = rendezvous.join(restart, expected)
            channel = RoundChannel(rendezvous.store, info, self.lost_after, self.shutdown.check)
            verdict = self._attempt(info, channel, reaper, rundir)
            if verdict.outcome != RESTART:
                channel.leave(hosting, expected=info.nnodes)
                return self._finish(verdict, restart)
            assert verdict.root is not None
            restart, expected = restart + 1, info.nnodes
            self.console.say(
                f"accordrun: attempt {restart - 1} failed: {verdict.root.summary()}. "
                f"Restarting every worker (restart {restart} of "
                f"{self.cfg.max_restarts})."
            )

    def _attempt(self, info: RoundInfo, channel: RoundChannel, reaper: Reaper, rundir: RunDir) -> Verdict:
        group, pump = LocalGroup(reaper), OutputPump(self.console)
        error_files = [
            os.path.join(rundir.worker_dir(info.restart, i), "error.json")
            for i in range(self.cfg.nproc_per_node)
        ]
        self.shutdown.group = group
        try:
            self._start(group, pump, info, error_files, rundir)
            status = self._watch(group, channel, info, error_files)
        finally:
            group.stop(self.cfg.shutdown_timeout, channel.beat if info.nnodes > 1 else None)
            self.shutdown.group = None
            pump.drain(2.0)
            pump.close()
        channel.publish(status)
        mine = decide(info, channel.gather(), self.cfg.max_restarts, self.lost_after)
        return channel.settle(mine)

    def _start(
        self, group: LocalGroup, pump: OutputPump, info: RoundInfo, error_files: list[str], rundir: RunDir
    ) -> None:
        cfg = self.cfg
        job = JobFacts(
            cfg.role,
            info.master_addr,
            info.master_port,
            cfg.run_id,
            info.restart,
            cfg.max_restarts,
            ",".join(cfg.signals),
        )
        places = info.places()
        envs = [worker_env(self.environ, place, job, error_files[place.local_rank]) for place in places]
        commands = [
            worker_command(
                cfg.entrypoint,
                cfg.args,
                cfg.module,
                cfg.no_python,
                f"--local-rank={p.local_rank}" if self.local_rank_arg else None,
            )
            for p in places
        ]
        group.start(commands, envs)
        for place, proc in zip(places, group.procs):
            prefix = line_prefix(place.rank, place.local_rank, cfg.role)
            targets = stream_targets(
                self.console, place.local_rank, cfg.redirects, cfg.tee, cfg.local_ranks_filter
            )
            folder = rundir.worker_dir(info.restart, place.local_rank)
            for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                shown, logged = targets[name]
                pump.add(
                    cast(BinaryIO, pipe),
                    prefix,
                    shown,
                    os.path.join(folder, f"{name}.log") if logged else None,
                )
        pump.start()

    def _watch(
        self, group: LocalGroup, channel: RoundChannel, info: RoundInfo, error_files: list[str]
    ) -> NodeStatus:
        """Until the local workers end, one fails, another node fails, or a signal comes."""
        several = info.nnodes > 1
        while True:
            event = group.next_exit(self.cfg.monitor_interval)
            if self.shutdown.signum is not None:  # exits after a forwarded signal are its doing
                if several:
                    channel.raise_alarm()
                name = signal.Signals(self.shutdown.signum).name
                self.shutdown.handled = True
                return self._status(info, INTERRUPTED, [], name)
            if event is not None and event.returncode != 0:
                exits = [event, *self._queued(group)]
                failures = [self._failure(e, info, error_files) for e in exits if e.returncode]
                self._await_root_cause(group, info, error_files, failures, channel.beat if several else None)
                if several:
                    channel.raise_alarm()
                failures.sort(key=lambda f: (f.caused_by_a_peer(), f.time))
                return self._status(info, FAILED, failures)
            if event is not None and not group.running():
                return self._status(info, SUCCEEDED, [])
            if several:
                channel.beat()
                if channel.failed_elsewhere():
                    return self._status(info, STOPPED, [])

    def _await_root_cause(
        self,
        group: LocalGroup,
        info: RoundInfo,
        error_files: list[str],
        failures: list[Failure],
        tick: Callable[[], None] | None,
    ) -> None:
        """While every failure so far blames a peer ('rank 1 raised ValueError …'), the rank
        it blames is usually still on its way out (printing its traceback, writing its error
        file): wait up to ``_ROOT_CAUSE_GRACE_S`` for more exits, so that the report names the
        rank that failed first rather than the first to exit."""
        deadline = time.monotonic() + _ROOT_CAUSE_GRACE_S
        while all(f.caused_by_a_peer() for f in failures) and group.running():
            left = deadline - time.monotonic()
            if left <= 0 or self.shutdown.signum is not None:
                return
            event = group.next_exit(min(left, 0.05))
            if tick is not None:
                tick()
            if event is not None and event.returncode:
                failures.append(self._failure(event, info, error_files))

    @staticmethod
    def _queued(group: LocalGroup) -> list[WorkerExit]:
        exits = []
        while (event := group.next_exit(0.0)) is not None:
            exits.append(event)
        return exits

    def _status(self, info: RoundInfo, outcome: str, failures: list[Failure], detail: str = "") -> NodeStatus:
        return NodeStatus(info.node_rank, self.host, outcome, failures, detail)

    def _failure(self, event: WorkerExit, info: RoundInfo, error_files: list[str]) -> Failure:
        place = info.places()[event.local_rank]
        return make_failure(
            place.rank,
            place.local_rank,
            info.node_rank,
            self.host,
            event.pid,
            event.returncode,
            event.time,
            error_files[event.local_rank],
            self.cfg.no_python,
        )

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
        self.console.say(format_report(self.cfg.entrypoint, verdict.root, verdict.others, footer))
        return 1
