"""This node's workers in one attempt: starting them, their failures, and replacing one in place.

Owns: each worker's command line, environment (``env``), folder, error file and output (the
pump: console lines and log files); turning a worker's exit into a ``Failure``; and
--replace-workers on this node: whether a worker that failed is replaced while the others go
on, and starting the replacement in its place (the same local rank, command and environment,
with ``ACCORD_JOIN=1``: its ``init_process_group`` joins the running job, which takes it in
with ``grow_group``; its own folder and error file under the attempt's). A failure is
replaced when

* it is the worker's own, not the fallout of another's (``PeerError``: the program did not go
  on without the lost rank — no ``shrink_group`` — and a replacement would wait for an
  admission nobody gives: the job stops as without the option);
* a restart is left: each replacement counts against --max-restarts, across nodes
  (``RoundChannel.take_replacement``);
* on a job of one node, another worker still runs to take it in (a worker that ends when every
  other has finished is not replaced).

The failures replaced are kept: when the job stops from their fallout (the survivors' own
``PeerError``), the report names the replaced one as the root cause. Must not know how nodes
agree (``rounds``) or how a newcomer is admitted (accord's API: ``admission``).
"""

from __future__ import annotations

import os
import socket
from typing import BinaryIO, cast

from .env import JobFacts, WorkerPlace, worker_env
from .nodes import RoundInfo
from .options import LaunchConfig
from .output import Console, OutputPump, RunDir, line_prefix, stream_targets
from .procs import LocalGroup, Reaper, WorkerExit, worker_command
from .report import Failure, make_failure
from .rounds import RoundChannel


class LocalWorkers:
    """The workers of this node for attempt ``info.restart``."""

    def __init__(
        self,
        cfg: LaunchConfig,
        info: RoundInfo,
        environ: dict[str, str],
        console: Console,
        rundir: RunDir,
        reaper: Reaper | None,
        local_rank_arg: bool = False,
    ) -> None:
        self.cfg, self.info, self.environ, self.console = cfg, info, environ, console
        self.rundir, self.local_rank_arg = rundir, local_rank_arg
        self.group = LocalGroup(reaper)
        self.pump = OutputPump(console, follow=cfg.replace_workers)
        self.places = info.places()
        self.error_files = [self._error_file(p.local_rank) for p in self.places]
        self.replaced: list[Failure] = []  # the failures this node replaced in place
        self.host = socket.gethostname()
        self._job = JobFacts(
            cfg.role,
            info.master_addr,
            info.master_port,
            cfg.run_id,
            info.restart,
            cfg.max_restarts,
            ",".join(cfg.signals),
        )

    def _error_file(self, local_rank: int, replacement: int = 0) -> str:
        return os.path.join(self.rundir.worker_dir(self.info.restart, local_rank, replacement), "error.json")

    def _command(self, place: WorkerPlace) -> list[str]:
        cfg = self.cfg
        local_rank_arg = f"--local-rank={place.local_rank}" if self.local_rank_arg else None
        return worker_command(cfg.entrypoint, cfg.args, cfg.module, cfg.no_python, local_rank_arg)

    def start(self) -> None:
        """Start every local worker of the attempt, their output followed."""
        envs = [worker_env(self.environ, p, self._job, self.error_files[p.local_rank]) for p in self.places]
        self.group.start([self._command(p) for p in self.places], envs)
        for place, proc in zip(self.places, self.group.procs):
            self._follow_output(place, proc.stdout, proc.stderr, 0)
        self.pump.start()

    def _follow_output(self, place: WorkerPlace, stdout: object, stderr: object, replacement: int) -> None:
        cfg = self.cfg
        prefix = line_prefix(place.rank, place.local_rank, cfg.role)
        targets = stream_targets(
            self.console, place.local_rank, cfg.redirects, cfg.tee, cfg.local_ranks_filter
        )
        folder = self.rundir.worker_dir(self.info.restart, place.local_rank, replacement)
        for name, pipe in (("stdout", stdout), ("stderr", stderr)):
            shown, logged = targets[name]
            log = os.path.join(folder, f"{name}.log") if logged else None
            self.pump.add(cast(BinaryIO, pipe), prefix, shown, log)

    def stop(self) -> None:
        """Stop every worker still running (SIGTERM, then SIGKILL after --shutdown-timeout)
        and take the rest of their output."""
        try:
            self.group.stop(self.cfg.shutdown_timeout)
        finally:
            self.pump.drain(2.0)
            self.pump.close()

    def failure(self, event: WorkerExit) -> Failure:
        """The failure of the worker whose exit is ``event`` (its error file read)."""
        place = self.places[event.local_rank]
        return make_failure(
            place.rank,
            place.local_rank,
            self.info.node_rank,
            self.host,
            event.pid,
            event.returncode,
            event.time,
            self.error_files[event.local_rank],
            self.cfg.no_python,
        )

    def replace(self, failure: Failure, channel: RoundChannel) -> bool:
        """--replace-workers: start a worker in the place of the one that failed, if the
        rules above allow it (the console is told either way); whether it was replaced."""
        head = _sentence(failure.summary())
        if failure.caused_by_a_peer():
            kind = failure.message.split(":", 1)[0].rsplit(".", 1)[-1]
            self.console.say(
                f"accordrun: rank {failure.rank} (local_rank {failure.local_rank} on {self.host}) "
                f"failed because another rank did ({kind}): the program did not go on without "
                f"that rank (shrink_group, grow_group), so every worker stops."
            )
            return False
        if self.cfg.max_nodes == 1 and not self.group.running():
            self.console.say(f"accordrun: {head} No other worker runs to take a replacement in.")
            return False
        used = channel.take_replacement(self.cfg)
        if used is None:
            self.console.say(
                f"accordrun: {head} No restart is left to replace it (--max-restarts "
                f"{self.cfg.max_restarts}): every worker stops."
            )
            return False
        self.replaced.append(failure)
        nth = sum(f.local_rank == failure.local_rank for f in self.replaced)
        place = self.places[failure.local_rank]
        self.error_files[place.local_rank] = self._error_file(place.local_rank, nth)
        env = worker_env(self.environ, place, self._job, self.error_files[place.local_rank], joining=True)
        proc = self.group.replace(place.local_rank, self._command(place), env)
        self._follow_output(place, proc.stdout, proc.stderr, nth)
        self.console.say(
            f"accordrun: {head} Starting a worker in its place (pid {proc.pid}; restart {used} of "
            f"{self.cfg.max_restarts}); the other workers go on."
        )
        return True

    def reported(self, failures: list[Failure]) -> list[Failure]:
        """The failures to report when the workers stop: ``failures``, and the ones replaced
        before if every one of ``failures`` is their fallout (a ``PeerError``)."""
        if failures and all(f.caused_by_a_peer() for f in failures):
            return [*self.replaced, *failures]
        return failures


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else f"{text}."
