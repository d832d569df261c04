"""``python -m accord.bench``: nccl-tests-style tables for accord, with torch's gloo beside it.

Owns: the command line, the size sweep, the progress display and the output files. Every
number comes from ``runner`` (real processes) and ``report`` (statistics).
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import config
from . import mpi_side, plot, report, runner
from .workloads import COLLECTIVES


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def sweep(minimum: int, maximum: int, factor: int) -> list[int]:
    sizes, size = [], minimum
    while size <= maximum:
        sizes.append(size)
        size *= factor
    return sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="accord bench", description=__doc__)
    p.add_argument("--ops", default="all_reduce,broadcast,barrier",
                   help=f"comma-separated collectives ({', '.join(COLLECTIVES)})")
    p.add_argument("--world", "-n", type=int, default=2, help="number of processes")
    p.add_argument("--sizes", help="explicit sizes, e.g. 8,1M,16M (overrides --min/--max)")
    p.add_argument("--min", default="8", help="smallest size (bytes; K/M/G suffixes)")
    p.add_argument("--max", default="16M", help="largest size")
    p.add_argument("--factor", type=int, default=4, help="size multiplier of the sweep")
    p.add_argument("--iters", type=int, default=200, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=10, help="untimed iterations per size")
    p.add_argument("--runs", type=int, default=1,
                   help="run everything this many times (fresh processes each time, the "
                        "implementations in alternating order) and report the median of the "
                        "runs' medians with their range, and ratios run by run")
    p.add_argument("--compare", default="",
                   help="also run these, comma-separated: gloo (torch.distributed on gloo), "
                        "torch-accord (torch.distributed on backend accord), mpi (MPICH)")
    p.add_argument("--backend", choices=["accord", "mpi"], default="accord",
                   help="accord's backend: its own transports, or mpi (MPI's collectives under "
                        "mpiexec, needs the mpi extra)")
    p.add_argument("--transport", choices=["auto", "tcp"], default=config.transport(),
                   help="accord's transport: auto (shared memory on one host) or tcp "
                        "(default: ACCORD_TRANSPORT, else auto)")
    p.add_argument("--plot", help="draw busbw vs size to this PNG (needs matplotlib)")
    p.add_argument("--json", help="write the rows to this JSON file")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = [op for op in ops if op not in COLLECTIVES]
    if unknown:
        print(f"unknown collectives {unknown}; known: {sorted(COLLECTIVES)}", file=sys.stderr)
        return 2
    sizes = ([parse_size(s) for s in args.sizes.split(",")] if args.sizes
             else sweep(parse_size(args.min), parse_size(args.max), args.factor))
    impls = ["accord"] + [c.strip() for c in args.compare.split(",") if c.strip()]
    unknown_impls = [i for i in impls[1:] if i not in ("gloo", "torch-accord", "mpi")]
    if unknown_impls:
        print(f"cannot compare with {unknown_impls}; known: gloo, torch-accord, mpi", file=sys.stderr)
        return 2
    if args.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    env = {"ACCORD_TRANSPORT": args.transport}
    plan = runner.Plan(ops, sizes, args.iters, args.warmup, args.world, env)
    total = args.runs * sum(len(sizes) if COLLECTIVES[op].sized else 1 for op in ops for impl in impls
                            if COLLECTIVES[op].runs_on(impl, impl in ("gloo", "torch-accord")))
    runs: list[list[report.Row]] = []
    done = 0

    def on_row(impl: str, op: str, nbytes: int, per_rank: list[list[float]]) -> None:
        """Add one finished row and redraw the progress bar."""
        nonlocal done
        runs[-1].append(report.summarize(impl, op, nbytes, args.world, per_rank))
        done += 1
        if not args.quiet:
            bar = "#" * (30 * done // total)
            print(f"\r[{bar:<30}] {done}/{total} {impl} {op} {report.human_bytes(nbytes)}   ",
                  end="", file=sys.stderr, flush=True)

    for run in range(args.runs):
        runs.append([])
        for impl in (impls if run % 2 == 0 else impls[::-1]):  # (a host that drifts: both sides)
            if impl == "mpi":
                mpi_side.run(plan, on_row)
            elif impl == "accord" and args.backend == "mpi":
                mpi_side.run(plan, on_row, impl="accord")
            else:
                runner.run(impl, plan, on_row)
    if not args.quiet:
        print(file=sys.stderr)
    rows = runs[0] if args.runs == 1 else report.combine(runs)
    where = "backend mpi" if args.backend == "mpi" else f"accord transport {args.transport}"
    title = (f"world {args.world}, {where}, median of {args.iters} "
             f"iterations (slowest rank)")
    if args.runs > 1:
        title += f", median of {args.runs} runs (range)"
    print(f"# {title}; busbw as nccl-tests; ×impl = impl's time / accord's time "
          f"(torch-accord's on torch-only rows)")
    print(report.table(rows, impls))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"world": args.world, "transport": args.transport, "runs": args.runs,
                       "rows": report.as_json(rows)}, handle, indent=1)
    if args.plot:
        plot.plot(rows, args.plot, title)
    return 0
