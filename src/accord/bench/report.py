"""Turn per-rank timings into nccl-tests-style rows: time, algbw, busbw, and ratios.

Owns: the statistics (per rank median, slowest rank reported; over several runs, the median
of the runs' medians with their range, and ratios taken run by run), bandwidth arithmetic,
the text table and the JSON form. Must not know how workers run.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from .workloads import COLLECTIVES


@dataclass
class Row:
    impl: str
    op: str
    nbytes: int
    world: int
    median_us: float
    p99_us: float
    algbw_gbs: float
    busbw_gbs: float
    #: each run's median, in run order, when the row combines several runs (``combine``)
    runs_us: list[float] = field(default_factory=list)


def summarize(impl: str, op: str, nbytes: int, world: int, per_rank: list[list[float]]) -> Row:
    medians = [statistics.median(times) for times in per_rank]
    slowest = max(range(world), key=lambda r: medians[r])
    times = sorted(per_rank[slowest])
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    median = medians[slowest]
    algbw = nbytes / median / 1e9 if nbytes and median > 0 else 0.0
    return Row(impl, op, nbytes, world, median * 1e6, p99 * 1e6, algbw, algbw * COLLECTIVES[op].factor(world))


def combine(runs: list[list[Row]]) -> list[Row]:
    """The rows of several runs of one plan as one row per (impl, op, size): the median of
    the runs' medians (bandwidths from it, p99 the median of the runs'), every run's median
    kept in ``runs_us``. A noisy host moves a single run's figures by tens of percent."""
    grouped: dict[tuple[str, str, int], list[Row]] = {}
    for rows in runs:
        for row in rows:
            grouped.setdefault((row.impl, row.op, row.nbytes), []).append(row)
    combined = []
    for (impl, op, nbytes), rows in grouped.items():
        times = [r.median_us for r in rows]
        median = statistics.median(times)
        world = rows[0].world
        algbw = nbytes / (median / 1e6) / 1e9 if nbytes and median > 0 else 0.0
        combined.append(
            Row(
                impl,
                op,
                nbytes,
                world,
                median,
                statistics.median(r.p99_us for r in rows),
                algbw,
                algbw * COLLECTIVES[op].factor(world),
                times,
            )
        )
    return combined


def _ratios(other: Row, base: Row) -> list[float]:
    """other's time / base's, run by run (both ran in each run), else of the medians."""
    if len(other.runs_us) > 1 and len(other.runs_us) == len(base.runs_us):
        return [o / b for o, b in zip(other.runs_us, base.runs_us) if b]
    return [other.median_us / base.median_us] if base.median_us else []


def _times(ratio: float) -> str:
    """A ratio with two significant figures' worth of decimals: 0.53, 2.4, 55."""
    return f"{ratio:.2f}" if ratio < 10 else f"{ratio:.1f}" if ratio < 100 else f"{ratio:.0f}"


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def table(rows: list[Row], impls: list[str]) -> str:
    """One line per (op, size): each implementation's time and busbw, then ratios to accord
    (to torch-accord on the rows accord's own API does not run).
    Rows of several runs add each time's range over the runs and each ratio's (taken run by
    run, so that a run the whole host slowed down counts once, on both sides)."""
    spread = any(len(r.runs_us) > 1 for r in rows)
    time_width, ratio_width = (22, 19) if spread else (12, 8)
    name_width = max([14] + [len(r.op) + 1 for r in rows])
    head = f"{'collective':<{name_width}}{'size':>10}"
    for impl in impls:
        head += f" | {impl + ' µs':>{time_width}}{'busbw GB/s':>11}"
    for impl in impls[1:]:
        head += f" | {'×' + impl:>{ratio_width}}"
    lines = [head, "-" * len(head)]
    keyed = {(r.impl, r.op, r.nbytes): r for r in rows}
    for op, nbytes in dict.fromkeys((r.op, r.nbytes) for r in rows):
        line = f"{op:<{name_width}}{human_bytes(nbytes) if COLLECTIVES[op].sized else '-':>10}"
        for impl in impls:
            row = keyed.get((impl, op, nbytes))
            if row is None:
                line += f" | {'—':>{time_width}}{'—':>11}"
                continue
            text = f"{row.median_us:.1f}"
            if spread and len(row.runs_us) > 1:
                text += f" ({min(row.runs_us):.1f}–{max(row.runs_us):.1f})"
            line += f" | {text:>{time_width}}{row.busbw_gbs:>11.3f}"
        # torch-only rows (a DDP step, functional collectives): ratios to torch-accord's time
        base = keyed.get((impls[0], op, nbytes)) or keyed.get(("torch-accord", op, nbytes))
        for impl in impls[1:]:
            other = keyed.get((impl, op, nbytes))
            ratios = _ratios(other, base) if base and other else []
            if not ratios:
                line += f" | {'—':>{ratio_width}}"
                continue
            text = f"{_times(statistics.median(ratios))}×"
            if len(ratios) > 1:
                text += f" ({_times(min(ratios))}–{_times(max(ratios))})"
            line += f" | {text:>{ratio_width}}"
        lines.append(line)
    return "\n".join(lines)


def as_json(rows: list[Row]) -> list[dict[str, object]]:
    return [asdict(r) for r in rows]


def ddp_bounds(rows: list[Row], impls: list[str]) -> list[str]:
    """Under a table with the DDP rows: each implementation's step against its bounds, run by
    run (median and range): step / (floor + reduction), and step / (sync + reduction), where
    the ranks' meeting at each bucket counts too. Empty without those rows."""
    keyed = {(r.impl, r.op): r for r in rows}
    lines = []
    for impl in impls:
        step, reduction = keyed.get((impl, "ddp_step")), keyed.get((impl, "ddp_reduction"))
        if step is None or reduction is None:
            continue
        parts = []
        for floor_op, name in (("ddp_floor", "floor"), ("ddp_sync", "sync")):
            floor = keyed.get((impl, floor_op))
            if floor is None:
                continue
            ratios = _bound_ratios(step, floor, reduction)
            text = f"step / ({name} + reduction) {_times(statistics.median(ratios))}"
            if len(ratios) > 1:
                text += f" ({_times(min(ratios))}–{_times(max(ratios))})"
            parts.append(text)
        if parts:
            lines.append(f"# {impl}: " + "; ".join(parts))
    if lines:
        lines.insert(0, "# DDP step against its bound (a core per rank: reduction and backward add up)")
    return lines


def _bound_ratios(step: Row, floor: Row, reduction: Row) -> list[float]:
    """step / (floor + reduction), run by run when all three ran in each run."""
    runs = len(step.runs_us)
    if runs > 1 and len(floor.runs_us) == runs and len(reduction.runs_us) == runs:
        return [s / (f + r) for s, f, r in zip(step.runs_us, floor.runs_us, reduction.runs_us) if f + r]
    total = floor.median_us + reduction.median_us
    return [step.median_us / total] if total else []
