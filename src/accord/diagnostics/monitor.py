"""The monitor of one world: what happens, diagnostically, when one of its groups fails or ends.

Owns: ``Monitor`` — attached to every group of a world (``group.monitor``). When a group
breaks it adds the stuck report to a timeout's message, dumps the flight recorder (once per
failure, on timeout and on peer error) and names the dump in the message; when a send or
receive times out it adds what the peer was doing (and dumps); when a group is
destroyed it logs the group's communication statistics (INFO). Also ``comm_stats`` for a list
of groups. Must not know about the API or the launcher.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import DistTimeoutError, PeerError
from ..group.process_group import ProcessGroup
from . import flight_recorder
from .debug import DebugLevel, get_debug_level
from .progress import ProgressBoard, peer_report, stuck_report

log = logging.getLogger("accord")


class Monitor:
    """Diagnostics for the groups of one world (one rank)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        board: ProgressBoard | None,
        groups: Callable[[], Sequence[ProcessGroup]],
        job: str,
    ) -> None:
        self.rank = rank
        self.job = job  # the same on every rank: names the dump directory
        self.world_size = world_size
        self.board = board
        self._groups = groups
        self.last_dump: str | None = None
        #: the world's membership changes (``World.membership``): in dumps and stuck reports
        self.membership: list[dict[str, Any]] = []

    def attach(self, group: ProcessGroup) -> None:
        group.monitor = self
        if self.board is not None:
            self.board.add(group)

    def detach(self, group: ProcessGroup) -> None:
        if self.board is not None:
            self.board.remove(group)
        if get_debug_level() >= DebugLevel.INFO:
            log.info("%s", format_stats(group))

    def close(self) -> None:
        if self.board is not None:
            self.board.close()

    def dump(self, reason: str, path: str | None = None) -> str | None:
        self.last_dump = flight_recorder.dump(
            self.rank, self.world_size, self._groups(), reason, self.job, path, self.membership
        )
        return self.last_dump

    def group_failed(self, group: ProcessGroup, context: str, exc: BaseException) -> None:
        """``group`` is breaking because of ``exc`` (raised by the call of ``context``)."""
        if not isinstance(exc, (DistTimeoutError, PeerError)):
            return  # a mismatch or a caller's error: the message already says everything
        extra = []
        record = group.recorder.last_failed
        if isinstance(exc, DistTimeoutError) and self.board is not None and record is not None:
            report, missing = stuck_report(self.board, group, record.seq, record.op)
            extra.append(report)
            if self.membership:
                extra.append(describe_membership(self.membership))
            if record.op != "monitored_barrier":  # its first line names the missing ranks already
                _name_in_first_line(exc, missing)
        self._annotate(exc, extra)

    def p2p_timed_out(self, group: ProcessGroup, exc: BaseException, peer: int | None) -> None:
        """A send or receive with global rank ``peer`` (None: any rank) timed out on ``group``
        (which goes on): say what the peer was doing, and dump the flight recorder."""
        extra = [peer_report(self.board, group, peer)] if self.board is not None else []
        self._annotate(exc, extra)

    def _annotate(self, exc: BaseException, extra: list[str]) -> None:
        """Dump the flight recorder and add ``extra`` and the dump's path to ``exc``'s message."""
        try:
            path = self.dump(f"{type(exc).__name__}: {exc}")
        except OSError as err:
            extra.append(f"(flight recorder not written: {err})")
        else:
            if path is not None:
                extra.append(
                    f"Flight recorder of this rank: {path} (merge a job's dumps with "
                    f"'accord flight-recorder {path.rsplit('/', 1)[0]}')"
                )
        if extra and exc.args and isinstance(exc.args[0], str):
            exc.args = ("\n".join([exc.args[0], *extra]), *exc.args[1:])


def _name_in_first_line(exc: BaseException, missing: list[int]) -> None:
    """Put the ranks that never reached the call in the timeout's first line: the rank this
    one waited on directly (a ring neighbour) may be alive and waiting too."""
    if not missing or not exc.args or not isinstance(exc.args[0], str):
        return
    first, newline, rest = exc.args[0].partition("\n")
    names = ", ".join(map(str, missing))
    first += f" Did not reach this call: rank{'s' if len(missing) > 1 else ''} {names} (stuck report below)."
    exc.args = (first + newline + rest, *exc.args[1:])


def describe_membership(changes: list[dict[str, Any]]) -> str:
    """One line per membership change that led to this world: the ranks named above are
    this world's, and these say what they were before."""
    lines = [f"This world is the job's after {len(changes)} membership change(s) (ranks renumbered):"]
    for c in changes:
        what = (
            f"ranks {c['excluded']} excluded"
            if "excluded" in c
            else f"{c.get('admitted', 0)} newcomer(s) admitted"
        )
        lines.append(
            f"  #{c['change']} {c['what']}: {what}; world {c['size'][0]} -> {c['size'][1]}, this rank "
            f"{c['rank'][0]} -> {c['rank'][1]}"
        )
    return "\n".join(lines)


def comm_stats(groups: Sequence[ProcessGroup]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per group (by name) and operation: calls, bytes, total_s, max_s, mean_s, failed."""
    return {g.group_name: g.recorder.stats() for g in groups}


def format_stats(group: ProcessGroup) -> str:
    stats = group.recorder.stats()
    if not stats:
        return f"group {group.group_name!r} on rank {group.global_rank}: no collectives"
    rows = [
        f"{op}: {s['calls']} calls, {s['bytes']} B, total {s['total_s'] * 1e3:.1f} ms, "
        f"max {s['max_s'] * 1e3:.2f} ms" + (f", {s['failed']} failed" if s["failed"] else "")
        for op, s in stats.items()
    ]
    return f"group {group.group_name!r} on rank {group.global_rank}: " + "; ".join(rows)
