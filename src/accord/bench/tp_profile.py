"""How much of a decoded token is communication, read from torch profiler events.

Owns: which events are communication and how their time is counted. Under DTensor a
collective shows as three kinds of event, and which ones appear depends on the backend:

- the functional op that issues it (``_c10d_functional::all_reduce``,
  ``_c10d_functional::all_gather_into_tensor`` …; ``c10d::allreduce_`` … where a plain
  ``torch.distributed`` call issues it): on the caller's thread, as long as issuing takes —
  the whole collective when the backend runs it there;
- the wait (``_c10d_functional::wait_tensor``, and ``c10d::wait``): the caller blocked until
  the collective is done;
- the backend's own event (``accord:all_reduce``, ``gloo:all_reduce``): the collective's
  run, on the thread that runs it — gloo's worker, accord's caller or worker. torch records
  accord's worker only when the profiler records every thread, so the profile is taken so
  (``every_thread``) for every backend alike.

They nest and overlap, so their durations are not added: the communication time of a token
is the length of the union of all these intervals, on every thread, cut to the token's own
interval (``tp:token``, which the decoding loop records around each token). That is the time
during which the token had a collective in flight or was issuing or waiting for one; in
decoding nothing else runs meanwhile, so it is the time the token lost to communication.
``issue``, ``wait`` and ``backend`` are the unions of each kind alone (what dominates):
communication time outside ``backend`` is spent above the backend's own call — torch's
functional op, the Python trampoline into the backend, waking the waiting thread.

A collective also waits for the last rank to call it: ``spans`` gives each collective's
(issued, done) on this rank, in call order, on the wall clock every process of a host shares
(``events_of``), so that the report can split a collective's time into waiting for a late
peer (its compute ran longer, or the scheduler ran something else) and the rest.
DTensor's own bookkeeping around them (``Redistribute``, sharding propagation) is not
communication and is not counted. Must not know how workers run; works on plain tuples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: the record_function name the decoding loop puts around each profiled token
TOKEN_EVENT = "tp:token"
_WAITS = ("_c10d_functional::wait_tensor", "c10d::wait", "c10d_functional::wait_tensor")
_ISSUE_PREFIXES = ("_c10d_functional::", "c10d_functional::", "c10d::")
_BACKEND_PREFIXES = ("accord:", "gloo:", "mpi:", "nccl:")
#: functional helpers that neither move bytes nor wait (they wrap the output for autograd)
_NOT_COMMUNICATION = ("_c10d_functional::_wrap_tensor_autograd",)

Interval = tuple[float, float]


@dataclass
class TokenComm:
    """Per-token means over the profiled tokens, in microseconds."""

    tokens: int
    token_us: float
    comm_us: float
    issue_us: float
    wait_us: float
    backend_us: float
    #: how many events of each communication name one token has (what was counted)
    counts: dict[str, float]

    @property
    def share(self) -> float:
        return self.comm_us / self.token_us if self.token_us else 0.0


def kind(name: str) -> str | None:
    """ "wait", "issue", "backend", or None for an event that is not communication."""
    if name in _WAITS:
        return "wait"
    if name in _NOT_COMMUNICATION:
        return None
    if name.startswith(_ISSUE_PREFIXES):
        return "issue"
    if name.startswith(_BACKEND_PREFIXES):
        return "backend"
    return None


def union_within(intervals: Iterable[Interval], span: Interval) -> float:
    """Length of the union of ``intervals`` cut to ``span``."""
    lo, hi = span
    total, end = 0.0, lo
    for start, stop in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if stop <= start or stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def token_comm(events: Iterable[tuple[str, float, float]]) -> TokenComm:
    """Communication per token from ``(name, start_us, end_us)`` events of a profile holding
    ``TOKEN_EVENT`` intervals."""
    tokens: list[Interval] = []
    by_kind: dict[str, list[Interval]] = {"issue": [], "wait": [], "backend": []}
    named: dict[str, list[Interval]] = {}
    for name, start, end in events:
        if name == TOKEN_EVENT:
            tokens.append((start, end))
            continue
        which = kind(name)
        if which is not None:
            by_kind[which].append((start, end))
            named.setdefault(name, []).append((start, end))
    every = [i for group in by_kind.values() for i in group]
    n = len(tokens) or 1
    counts = {
        name: sum(1 for s, _ in found for lo, hi in tokens if lo <= s < hi) / n
        for name, found in sorted(named.items())
    }
    return TokenComm(
        len(tokens),
        sum(hi - lo for lo, hi in tokens) / n,
        sum(union_within(every, t) for t in tokens) / n,
        sum(union_within(by_kind["issue"], t) for t in tokens) / n,
        sum(union_within(by_kind["wait"], t) for t in tokens) / n,
        sum(union_within(by_kind["backend"], t) for t in tokens) / n,
        {k: v for k, v in counts.items() if v},
    )


def spans(events: Iterable[tuple[str, float, float]]) -> list[Interval]:
    """(issued, done) of each collective in the ``TOKEN_EVENT`` intervals, in call order: the
    start of the functional op that issued it and the end of the wait_tensor for it. Empty
    when issues and waits do not pair up (not functional collectives, or overlapped ones)."""
    events = list(events)
    tokens = [(s, e) for name, s, e in events if name == TOKEN_EVENT]

    def inside(start: float) -> bool:
        return any(lo <= start < hi for lo, hi in tokens)

    issues = sorted(
        s
        for name, s, _ in events
        if name.startswith("_c10d_functional::") and kind(name) == "issue" and inside(s)
    )
    waits = sorted((s, e) for name, s, e in events if name == _WAITS[0] and inside(s))
    if len(issues) != len(waits):
        return []
    paired = [(issued, wait_start, done) for issued, (wait_start, done) in zip(issues, waits)]
    nexts = [*issues[1:], float("inf")]
    if any(
        not issued <= wait_start <= done <= after  # one collective at a time
        for (issued, wait_start, done), after in zip(paired, nexts)
    ):
        return []
    return [(issued, done) for issued, _, done in paired]


def every_thread(torch: Any) -> Any:
    """The profiler's config that records every thread (torch's ``profile_all_threads``),
    or None where this torch has none (then only the threads torch knows record)."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        return None


def events_of(prof: Any) -> list[tuple[str, float, float]]:
    """``(name, start_us, end_us)`` of every event of a finished ``torch.profiler.profile``, in
    µs of the wall clock (the trace's start plus the event's offset): the processes of one
    host can compare their events."""
    results: Any = getattr(prof.profiler, "kineto_results", None)
    base = results.trace_start_ns() / 1e3 if hasattr(results, "trace_start_ns") else 0.0
    return [(e.name, base + e.time_range.start, base + e.time_range.end) for e in prof.events()]
