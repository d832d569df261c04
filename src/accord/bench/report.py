"""Turn per-rank timings into nccl-tests-style rows: time, algbw, busbw, and ratios.

Owns: the statistics (per rank median, slowest rank reported), bandwidth arithmetic, the text
table and the JSON form. Must not know how workers run.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

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


def summarize(impl: str, op: str, nbytes: int, world: int, per_rank: list[list[float]]) -> Row:
    medians = [statistics.median(times) for times in per_rank]
    slowest = max(range(world), key=lambda r: medians[r])
    times = sorted(per_rank[slowest])
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    median = medians[slowest]
    algbw = nbytes / median / 1e9 if nbytes and median > 0 else 0.0
    return Row(impl, op, nbytes, world, median * 1e6, p99 * 1e6, algbw,
               algbw * COLLECTIVES[op].factor(world))


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def table(rows: list[Row], impls: list[str]) -> str:
    """One line per (op, size): each implementation's time and busbw, then ratios to accord."""
    head = f"{'collective':<14}{'size':>10}"
    for impl in impls:
        head += f" | {impl + ' µs':>12}{'busbw GB/s':>11}"
    for impl in impls[1:]:
        head += f" | {'×' + impl:>8}"
    lines = [head, "-" * len(head)]
    keyed = {(r.impl, r.op, r.nbytes): r for r in rows}
    for op, nbytes in dict.fromkeys((r.op, r.nbytes) for r in rows):
        line = f"{op:<14}{human_bytes(nbytes) if COLLECTIVES[op].sized else '-':>10}"
        for impl in impls:
            row = keyed.get((impl, op, nbytes))
            line += f" | {row.median_us:>12.1f}{row.busbw_gbs:>11.3f}" if row else f" | {'—':>12}{'—':>11}"
        base = keyed.get((impls[0], op, nbytes))
        for impl in impls[1:]:
            other = keyed.get((impl, op, nbytes))
            ratio = other.median_us / base.median_us if base and other and base.median_us else 0
            line += f" | {ratio:>7.1f}×" if ratio else f" | {'—':>8}"
        lines.append(line)
    return "\n".join(lines)


def as_json(rows: list[Row]) -> list[dict[str, object]]:
    return [asdict(r) for r in rows]
