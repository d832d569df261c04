"""The signals a launcher handles: forwarded at once to every worker, a second one kills them.

Owns: ``Shutdown`` (the handlers of --signals-to-handle: the first signal goes to every running
worker's process group and becomes the attempt's outcome; a second one SIGKILLs the workers;
one that comes while no worker runs ends the launcher) and ``Interrupted``. Must not know how
workers are started or how nodes agree.
"""

from __future__ import annotations

import signal
from typing import Any

from .procs import LocalGroup


class Interrupted(Exception):
    """A handled signal arrived while no worker was running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Shutdown:
    """Signal handling: the first signal is forwarded to the workers, a second kills them."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.group: LocalGroup | None = None
        self.handled = False  # the signal became the attempt's outcome: finish agreeing on it
        self._previous: dict[int, Any] = {}

    def install(self, names: tuple[str, ...]) -> None:
        for name in names:  # checked by options.parse_signals
            signum = signal.Signals[name]
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: object) -> None:
        group = self.group
        if self.signum is not None:  # a second signal: no more patience
            if group is None:
                raise Interrupted(signum)
            group.signal(signal.SIGKILL)
            return
        self.signum = signum
        if group is None or not group.running():
            raise Interrupted(signum)
        group.signal(signum)

    def check(self) -> None:
        """Raise Interrupted if a signal came while no worker ran (a wait may end early)."""
        if self.signum is not None and self.group is None and not self.handled:
            raise Interrupted(self.signum)
