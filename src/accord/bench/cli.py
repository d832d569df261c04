"""``python -m accord.bench``: nccl-tests-style tables for accord, with torch's gloo beside it;
``--tp``: tensor-parallel decoding of a small Llama-style model, ms per token and its
communication share, on accord, gloo and one process.

Owns: the command line, the size sweep, the progress display and the output files. Every
number comes from ``runner`` (real processes) and ``report`` (statistics); ``--tp``'s from
``tp`` and ``tp_report``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

from .. import config
from . import mpi_side, plot, report, runner
from .shape import DecoderConfig
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
    p.add_argument(
        "--ops",
        default="all_reduce,broadcast,barrier",
        help=f"comma-separated collectives ({', '.join(COLLECTIVES)})",
    )
    p.add_argument("--world", "-n", type=int, default=2, help="number of processes")
    p.add_argument("--sizes", help="explicit sizes, e.g. 8,1M,16M (overrides --min/--max)")
    p.add_argument("--min", default="8", help="smallest size (bytes; K/M/G suffixes)")
    p.add_argument("--max", default="16M", help="largest size")
    p.add_argument("--factor", type=int, default=4, help="size multiplier of the sweep")
    p.add_argument("--iters", type=int, default=200, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=10, help="untimed iterations per size")
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="run everything this many times (fresh processes each time, the "
        "implementations in alternating order) and report the median of the "
        "runs' medians with their range, and ratios run by run",
    )
    p.add_argument(
        "--compare",
        default=None,
        help="also run these, comma-separated: gloo (torch.distributed on gloo), "
        "torch-accord (torch.distributed on backend accord), mpi (MPICH); "
        "with --tp: gloo, free (TP with free communication: its floor), sync (free, each "
        "collective one of accord's barriers: only the wait for every rank), one (default: all four)",
    )
    p.add_argument(
        "--backend",
        choices=["accord", "mpi"],
        default="accord",
        help="accord's backend: its own transports, or mpi (MPI's collectives under "
        "mpiexec, needs the mpi extra)",
    )
    p.add_argument(
        "--transport",
        choices=["auto", "tcp"],
        default=config.transport(),
        help="accord's transport: auto (shared memory on one host) or tcp "
        "(default: ACCORD_TRANSPORT, else auto)",
    )
    p.add_argument(
        "--timing",
        choices=["loop", "barrier"],
        default="loop",
        help="loop: calls back to back (nccl-tests); barrier: a barrier before each call, "
        "the call timed alone (OSU's micro-benchmarks)",
    )
    p.add_argument("--plot", help="draw busbw vs size to this PNG (needs matplotlib)")
    p.add_argument("--json", help="write the rows to this JSON file")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    tp = p.add_argument_group("tensor-parallel decoding (--tp)")
    tp.add_argument(
        "--tp",
        action="store_true",
        help="greedy decoding of a Llama-style model under torch's tensor parallelism "
        "(parallelize_module) on backend accord, beside gloo and one process "
        "without it: ms per token and the share of it in communication "
        "(torch profiler events); --world ranks, --runs, --warmup tokens apply",
    )
    defaults = DecoderConfig()
    for name, value, what in (
        ("layers", defaults.layers, "decoder layers"),
        ("hidden", defaults.hidden, "hidden size"),
        ("heads", defaults.heads, "attention heads"),
        ("ffn", defaults.ffn, "MLP width (0: Llama's 8/3 × hidden)"),
        ("vocab", defaults.vocab, "vocabulary"),
        ("tokens", 64, "timed tokens per run"),
        ("prompt", 16, "prompt tokens"),
        ("profiled", 16, "tokens decoded under the profiler (comm share)"),
        ("threads", 1, "torch threads per process"),
    ):
        tp.add_argument(f"--{name}", type=int, default=value, help=f"{what} (default {value})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tp:
        return main_tp(args)
    args.compare = args.compare or ""
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = [op for op in ops if op not in COLLECTIVES]
    if unknown:
        print(f"unknown collectives {unknown}; known: {sorted(COLLECTIVES)}", file=sys.stderr)
        return 2
    sizes = (
        [parse_size(s) for s in args.sizes.split(",")]
        if args.sizes
        else sweep(parse_size(args.min), parse_size(args.max), args.factor)
    )
    impls = ["accord"] + [c.strip() for c in args.compare.split(",") if c.strip()]
    unknown_impls = [i for i in impls[1:] if i not in ("gloo", "torch-accord", "mpi")]
    if unknown_impls:
        print(f"cannot compare with {unknown_impls}; known: gloo, torch-accord, mpi", file=sys.stderr)
        return 2
    if args.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    env = {"ACCORD_TRANSPORT": args.transport}
    plan = runner.Plan(ops, sizes, args.iters, args.warmup, args.world, env, args.timing)
    total = args.runs * sum(
        len(sizes) if COLLECTIVES[op].sized else 1
        for op in ops
        for impl in impls
        if COLLECTIVES[op].runs_on(impl, impl in ("gloo", "torch-accord"))
    )
    runs: list[list[report.Row]] = []
    done = 0

    def on_row(impl: str, op: str, nbytes: int, per_rank: list[list[float]]) -> None:
        """Add one finished row and redraw the progress bar."""
        nonlocal done
        runs[-1].append(report.summarize(impl, op, nbytes, args.world, per_rank))
        done += 1
        if not args.quiet:
            bar = "#" * (30 * done // total)
            print(
                f"\r[{bar:<30}] {done}/{total} {impl} {op} {report.human_bytes(nbytes)}   ",
                end="",
                file=sys.stderr,
                flush=True,
            )

    for run in range(args.runs):
        runs.append([])
        for impl in impls if run % 2 == 0 else impls[::-1]:  # (a host that drifts: both sides)
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
    title = f"world {args.world}, {where}, median of {args.iters} iterations (slowest rank)"
    if args.timing == "barrier":
        title += ", each call timed alone after a barrier (OSU style)"
    if args.runs > 1:
        title += f", median of {args.runs} runs (range)"
    print(
        f"# {title}; busbw as nccl-tests; ×impl = impl's time / accord's time "
        f"(torch-accord's on torch-only rows)"
    )
    print(report.table(rows, impls))
    for line in report.ddp_bounds(rows, impls):
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "world": args.world,
                    "transport": args.transport,
                    "runs": args.runs,
                    "rows": report.as_json(rows),
                },
                handle,
                indent=1,
            )
    if args.plot:
        plot.plot(rows, args.plot, title)
    return 0


def main_tp(args: argparse.Namespace) -> int:
    """``accord bench --tp``: TP decoding on accord and the --compare implementations."""
    from . import tp, tp_report

    compare = args.compare if args.compare is not None else "gloo,free,sync,one"
    impls = ["accord"] + [c.strip() for c in compare.split(",") if c.strip() not in ("", "accord")]
    unknown = [i for i in impls if i not in tp.IMPLEMENTATIONS]
    if importlib.util.find_spec("torch") is None:
        print("accord bench --tp needs torch: pip install 'accord[torch]'", file=sys.stderr)
        return 2
    config = DecoderConfig(
        vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads, ffn=args.ffn
    )
    try:
        if unknown:
            raise ValueError(f"cannot compare with {unknown}; known with --tp: gloo, free, sync, one")
        if args.runs < 1 or args.tokens < 1 or args.world < 1:
            raise ValueError("--runs, --tokens and --world must be at least 1")
        config.check(args.world)
    except ValueError as exc:
        print(f"accord bench --tp: {exc}", file=sys.stderr)
        return 2
    plan = tp.TpPlan(
        config,
        args.world,
        args.prompt,
        args.tokens,
        args.warmup,
        max(args.profiled, 1),
        args.threads,
        {"ACCORD_TRANSPORT": args.transport},
    )
    runs: list[list[tp_report.TpRow]] = []
    problems: list[str] = []
    for run in range(args.runs):
        results = {}
        for impl in impls if run % 2 == 0 else impls[::-1]:
            if not args.quiet:
                print(f"\rrun {run + 1}/{args.runs}: {impl}   ", end="", file=sys.stderr, flush=True)
            results[impl] = tp.run(impl, plan)
        runs.append([tp_report.summarize(impl, results[impl], impl not in tp.UNSYNCED) for impl in impls])
        problems += [p for p in tp_report.token_mismatches(results, tp.WRONG_SUMS) if p not in problems]
    if not args.quiet:
        print(file=sys.stderr)
    rows = runs[0] if args.runs == 1 else tp_report.combine(runs)
    _print_tp(args, config, plan.profiled, rows, problems)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "world": args.world,
                    "config": config.__dict__,
                    "runs": args.runs,
                    "rows": tp_report.as_json(rows),
                    "token_problems": problems,
                },
                handle,
                indent=1,
            )
    return 1 if any(p.endswith("than rank 0") for p in problems) else 0  # ranks disagree: a bug


def _print_tp(
    args: argparse.Namespace, config: DecoderConfig, profiled: int, rows: list[Any], problems: list[str]
) -> None:
    """The title lines, the table, what was counted and whether the tokens agree."""
    from . import tp, tp_report

    print(
        f"# TP decode, world {args.world} (one: 1 process), {args.layers} layers, hidden "
        f"{args.hidden}, {args.heads} heads, ffn {config.ffn_width}, vocab {args.vocab}; "
        f"{args.tokens} tokens after a {args.prompt}-token prompt, {args.threads} thread(s) "
        f"per process; slowest rank's median"
        + (f", median of {args.runs} runs (range)" if args.runs > 1 else "")
    )
    print(
        "# accord ÷ = accord's ms/token / this one's; comm % = time with a collective issued, "
        f"in flight or waited for / token time, over {profiled} profiled tokens; issue, "
        "wait, backend: ms per token in the functional op issuing a collective, in "
        "wait_tensor, in the backend's own events (accord:…, gloo:…); skew: of comm, ms "
        "per token before the last rank had issued the collective"
    )
    print(tp_report.table(rows))
    print("# counted as communication, events per token:")
    print("\n".join(tp_report.events_lines(rows)))
    costs = tp_report.comm_costs(rows)
    if costs:
        print(
            "# communication per token without the profiler: ms/token less free's (the same "
            "TP decode, its collectives free)"
        )
        print("\n".join(costs))
    skipped = [row.impl for row in rows if row.impl in tp.WRONG_SUMS]
    print(
        "# tokens: "
        + ("; ".join(problems) if problems else "the same on every rank of every implementation")
        + (f" ({', '.join(skipped)} not compared: its sums are wrong on purpose)" if skipped else "")
    )
