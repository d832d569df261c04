"""``accord bench --tp``'s numbers: per implementation, ms per token and the communication share.

Owns: the statistics (each rank's median token time, the slowest rank's taken; over several
runs, the median of the runs with their range, and ratios run by run), the communication
figures (means over ranks of ``tp_profile``'s per-token figures, medians over runs), the
check that every rank and implementation decoded the same tokens, and the text table and
JSON form. Must not know how workers run.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TpRow:
    impl: str
    ms_per_token: float
    p90_ms: float
    #: time in communication / a profiled token's time (the profiler slows the rest more)
    comm_share: float
    comm_ms: float
    issue_ms: float
    wait_ms: float
    #: the backend's own events (accord:…, gloo:…): issue to completion inside the backend
    backend_ms: float
    #: of comm_ms, the time a rank had issued a collective that a peer had not issued yet
    skew_ms: float
    #: a profiled token's time (the profiler's own cost included)
    profiled_ms: float
    #: what was counted: communication events per token, by name
    events: dict[str, float]
    runs_ms: list[float] = field(default_factory=list)
    runs_share: list[float] = field(default_factory=list)


def summarize(impl: str, ranks: Sequence[Any], synced: bool = True) -> TpRow:
    """One run of ``impl`` from its ranks' ``tp.RankResult``s. ``synced``: its collectives
    make the ranks wait for each other (not so the free job's: its skew is nan, shown —)."""
    medians = [statistics.median(r.times) for r in ranks]
    slowest = sorted(ranks[max(range(len(ranks)), key=lambda i: medians[i])].times)
    comm = [r.comm for r in ranks]

    def mean(key: str) -> float:
        return statistics.fmean(c[key] for c in comm)

    token_us = mean("token_us")
    share = statistics.fmean(c["comm_us"] / c["token_us"] if c["token_us"] else 0.0 for c in comm)
    ms = max(medians) * 1e3
    return TpRow(
        impl,
        ms,
        slowest[min(len(slowest) - 1, int(0.9 * len(slowest)))] * 1e3,
        share,
        mean("comm_us") / 1e3,
        mean("issue_us") / 1e3,
        mean("wait_us") / 1e3,
        mean("backend_us") / 1e3,
        skew(ranks) if synced else float("nan"),
        token_us / 1e3,
        comm[0]["counts"],
        [ms],
        [share],
    )


def skew(ranks: Sequence[Any]) -> float:
    """Per token, mean over ranks: how long each collective had been issued on this rank
    before the last rank issued it (0 for one process, nan where collectives did not pair)."""
    spans = [r.spans for r in ranks]
    if len(ranks) < 2:
        return 0.0
    if not all(spans) or len({len(s) for s in spans}) != 1:
        return float("nan")
    late = 0.0
    for call in zip(*spans):
        last = max(issued for issued, _ in call)
        late += sum(last - issued for issued, _ in call) / len(call)
    tokens: int = ranks[0].comm["tokens"]
    return late / max(tokens, 1) / 1e3


def combine(runs: list[list[TpRow]]) -> list[TpRow]:
    """Several runs' rows as one per implementation: medians of the runs, each run kept."""
    grouped: dict[str, list[TpRow]] = {}
    for rows in runs:
        for row in rows:
            grouped.setdefault(row.impl, []).append(row)
    out = []
    for impl, rows in grouped.items():

        def med(key: str, rows: list[TpRow] = rows) -> float:
            return float(statistics.median(getattr(r, key) for r in rows))

        out.append(
            TpRow(
                impl,
                med("ms_per_token"),
                med("p90_ms"),
                med("comm_share"),
                med("comm_ms"),
                med("issue_ms"),
                med("wait_ms"),
                med("backend_ms"),
                med("skew_ms"),
                med("profiled_ms"),
                rows[0].events,
                [r.ms_per_token for r in rows],
                [r.comm_share for r in rows],
            )
        )
    return out


def token_mismatches(results: dict[str, list[Any]], skip: Sequence[str] = ()) -> list[str]:
    """What differs among the tokens decoded: each rank against its job's rank 0 (a bug if
    anything), and each job against the first (float sums in another order may, rarely, flip
    a near tie). ``skip``: jobs whose tokens are not the model's (wrong sums on purpose)."""
    problems, first = [], None
    for impl, ranks in results.items():
        if impl in skip:
            continue
        for rank, result in enumerate(ranks[1:], start=1):
            if result.tokens != ranks[0].tokens:
                problems.append(f"{impl}: rank {rank} decoded other tokens than rank 0")
        if first is None:
            first = (impl, ranks[0].tokens)
        elif ranks[0].tokens != first[1]:
            at = next(i for i, (a, b) in enumerate(zip(first[1], ranks[0].tokens)) if a != b)
            problems.append(f"{impl} decoded other tokens than {first[0]} from token {at} on")
    return problems


def comm_costs(rows: list[TpRow]) -> list[str]:
    """Communication's cost per token measured without the profiler: each TP
    implementation's ms/token less the "free" job's (the same decode, its collectives free),
    and its share of the token; and the floor against gloo. Empty without a free row."""
    free = next((r for r in rows if r.impl == "free"), None)
    if free is None:
        return []
    lines = []
    sync = next((r for r in rows if r.impl == "sync" and r.ms_per_token), None)
    for row in rows:
        if row.impl in ("free", "one") or not row.ms_per_token:
            continue
        cost = row.ms_per_token - free.ms_per_token
        lines.append(
            f"#   {row.impl}: {cost:.2f} ms of {row.ms_per_token:.2f} per token "
            f"({100 * cost / row.ms_per_token:.0f} %)"
        )
        if row.impl == "gloo":
            lines.append(
                f"#   the floor (free) is {free.ms_per_token / row.ms_per_token:.2f}× gloo's "
                f"ms/token: no backend can take a TP token below it"
                + (
                    f"; with accord's barrier at each collective and no data (sync), "
                    f"{sync.ms_per_token / row.ms_per_token:.2f}×"
                    if sync is not None
                    else ""
                )
            )
    accord = next((r for r in rows if r.impl == "accord" and r.ms_per_token), None)
    if sync is not None and accord is not None:
        lines.append(
            f"#   accord is {accord.ms_per_token / sync.ms_per_token:.2f}× sync's ms/token: "
            f"{accord.ms_per_token - sync.ms_per_token:.2f} ms per token of data movement and "
            f"accord's own path beyond a barrier per collective"
        )
    return lines


def _range(values: list[float], fmt: str) -> str:
    return f" ({fmt.format(min(values))}–{fmt.format(max(values))})" if len(values) > 1 else ""


def table(rows: list[TpRow]) -> str:
    """One line per implementation; "accord ÷" is accord's ms/token over this one's (run by
    run where both ran in every run, with the range)."""
    spread = any(len(r.runs_ms) > 1 for r in rows)
    width = 21 if spread else 9
    head = (
        f"{'impl':<8}{'ms/token':>{width}}{'p90':>7} | {'accord ÷':>{width}} | "
        f"{'comm %':>{width - 4}}{'comm ms':>9}{'issue':>7}{'wait':>7}{'backend':>8}{'skew':>7}"
        f"{'profiled ms':>13}"
    )
    lines = [head, "-" * len(head)]
    base = next((r for r in rows if r.impl == "accord"), None)
    for row in rows:
        ratios = (
            [a / b for a, b in zip(base.runs_ms, row.runs_ms) if b]
            if base and len(base.runs_ms) == len(row.runs_ms)
            else []
        )
        if base and not ratios and row.ms_per_token:
            ratios = [base.ms_per_token / row.ms_per_token]
        ratio = (f"{statistics.median(ratios):.2f}×" + _range(ratios, "{:.2f}")) if ratios else "—"
        share = f"{100 * row.comm_share:.0f} %" + _range([100 * s for s in row.runs_share], "{:.0f}")
        ms = f"{row.ms_per_token:.2f}" + _range(row.runs_ms, "{:.2f}")
        skewed = f"{row.skew_ms:>7.2f}" if row.skew_ms == row.skew_ms else f"{'—':>7}"  # (nan: —)
        lines.append(
            f"{row.impl:<8}{ms:>{width}}{row.p90_ms:>7.2f} | {ratio:>{width}} | "
            f"{share:>{width - 4}}{row.comm_ms:>9.2f}{row.issue_ms:>7.2f}"
            f"{row.wait_ms:>7.2f}{row.backend_ms:>8.2f}{skewed}"
            f"{row.profiled_ms:>13.2f}"
        )
    return "\n".join(lines)


def events_lines(rows: list[TpRow]) -> list[str]:
    """What was counted as communication, per token, for each implementation."""
    return [
        f"#   {row.impl}: " + ", ".join(f"{name} {n:g}" for name, n in row.events.items())
        for row in rows
        if row.events
    ]


def as_json(rows: list[TpRow]) -> list[dict[str, object]]:
    """The rows as JSON values (a skew that is not defined, nan here, is null there)."""
    return [{k: None if v != v else v for k, v in asdict(r).items()} for r in rows]
