"""Time as values: a Clock that can be replaced in tests, and a Deadline computed once per call.

Owns: Clock, MonotonicClock, FakeClock, Deadline, and the conversion of torch-style timeouts
(``timedelta``, seconds, ``None``) into seconds. Must not know anything above the foundation.

A public call turns its timeout into one ``Deadline`` at the API edge and passes it down, so a
collective made of ten messages never waits ten timeouts. Code that *decides* on time takes a
Clock; real blocking waits (poll, Condition.wait) use ``Deadline.remaining()`` as their bound.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Protocol

from .errors import ArgumentError, ArgumentTypeError, DistTimeoutError

#: torch's default for gloo/CPU process groups.
DEFAULT_PG_TIMEOUT = timedelta(minutes=30)
#: torch's default for stores (kDefaultStoreTimeout).
DEFAULT_STORE_TIMEOUT = timedelta(seconds=300)


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to; for tests of code that decides on time."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


SYSTEM_CLOCK: Clock = MonotonicClock()


def to_seconds(timeout: timedelta | float | int | None, default: timedelta | float | None = None) -> float:
    """Turn a torch-style timeout into seconds; ``None`` takes ``default``.

    Raises:
        TypeError: the timeout is not a timedelta or a number.
        ValueError: the timeout is negative.
    """
    if timeout is None:
        if default is None:
            raise ArgumentError("a timeout is required here")
        timeout = default
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise ArgumentTypeError(
            f"timeout must be a datetime.timedelta or seconds, got {type(timeout).__name__}"
        )
    if seconds < 0:
        raise ArgumentError(f"timeout must be >= 0, got {seconds} s")
    return seconds


def format_seconds(seconds: float) -> str:
    """Short human form for messages: '30 s', '1.5 s', '250 ms', '30 min'."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    if seconds >= 1:
        return f"{seconds:g} s"
    return f"{seconds * 1000:g} ms"


class Deadline:
    """An absolute instant on a clock, with the budget it was made from (for messages)."""

    __slots__ = ("expires_at", "budget", "clock")

    def __init__(self, expires_at: float, budget: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.expires_at = expires_at
        self.budget = budget
        self.clock = clock

    @classmethod
    def after(cls, timeout: timedelta | float, clock: Clock = SYSTEM_CLOCK) -> Deadline:
        seconds = timeout if type(timeout) is float and timeout >= 0 else to_seconds(timeout)
        return cls(clock.now() + seconds, seconds, clock)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires_at - self.clock.now())

    def expired(self) -> bool:
        return self.clock.now() >= self.expires_at

    def earlier(self, other: Deadline | None) -> Deadline:
        """The sooner of two deadlines (``None`` counts as never)."""
        if other is None or self.expires_at <= other.expires_at:
            return self
        return other

    def raise_if_expired(self, waiting_for: str) -> None:
        """Raise DistTimeoutError naming what was awaited, if the deadline has passed."""
        if self.expired():
            raise DistTimeoutError(f"timed out after {format_seconds(self.budget)} waiting for {waiting_for}")

    def __repr__(self) -> str:
        return f"Deadline(in {self.remaining():.3f} s of {self.budget:g} s)"
