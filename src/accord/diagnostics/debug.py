"""The debug level: torch's ``DebugLevel``, ``set_debug_level``, ``get_debug_level`` and
``set_debug_level_from_env``.

Owns: the process-wide level (torch's is process-wide too, so this is the second piece of
module-level state in accord, next to the default world) and its reading from ACCORD_DEBUG or
TORCH_DISTRIBUTED_DEBUG. Must not know what the levels do: the monitor logs statistics at
INFO, the API runs the argument check at DETAIL.
"""

from __future__ import annotations

import enum
import logging
import sys

from .. import config


class DebugLevel(enum.IntEnum):
    """OFF (default), INFO (statistics logged when a group ends), DETAIL (every collective's
    arguments checked across ranks before it runs, and its time logged)."""

    OFF = 0
    INFO = 1
    DETAIL = 2


_level: DebugLevel | None = None  # None: not read from the environment yet
DETAIL_ON = False  # _level is DETAIL (read on every collective: a plain attribute is cheapest)


def get_debug_level() -> DebugLevel:
    """The current level (read from the environment on first use)."""
    global _level, DETAIL_ON
    if _level is None:
        _level = DebugLevel[config.debug_level_name()]
        DETAIL_ON = _level >= DebugLevel.DETAIL
    return _level


def set_debug_level(level: DebugLevel | int | str) -> None:
    """Set the level: a ``DebugLevel``, its name ("DETAIL") or its number."""
    global _level, DETAIL_ON
    if isinstance(level, str):
        try:
            level = DebugLevel[level.upper()]
        except KeyError:
            raise ValueError(f"unknown debug level {level!r}: expected OFF, INFO or DETAIL") from None
    try:
        _level = DebugLevel(int(level))
    except ValueError:
        raise ValueError(f"unknown debug level {level!r}: expected OFF, INFO or DETAIL") from None
    DETAIL_ON = _level >= DebugLevel.DETAIL


def set_debug_level_from_env() -> None:
    """Read ACCORD_DEBUG (else TORCH_DISTRIBUTED_DEBUG) again."""
    global _level, DETAIL_ON
    _level = DebugLevel[config.debug_level_name()]
    DETAIL_ON = _level >= DebugLevel.DETAIL


def show_logs() -> None:
    """At INFO or above, make accord's log lines visible when the program configured no
    logging at all (a stderr handler on the "accord" logger). Reads the level (init calls it)."""
    if get_debug_level() < DebugLevel.INFO:
        return
    logger = logging.getLogger("accord")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("accord %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
