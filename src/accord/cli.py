"""The ``accord`` command: ``accord bench …`` (the benchmark), ``accord config`` (settings),
``accord flight-recorder DIR`` (merge a job's flight-recorder dumps), ``accord top`` (a live
view of a running job) and ``accord --version``.

Owns: dispatching subcommands; each lives in its own module. Must not know what they do.
"""

from __future__ import annotations

import sys

USAGE = """usage: accord <command> [options]
       accord --version

commands:
  bench    nccl-tests-style benchmark, torch's gloo (and MPI) side by side; accord bench -h
           (--tp: tensor-parallel decoding, ms per token and its communication share)
  config   every environment variable accord reads, with its current value
  flight-recorder DIR   merge a job's flight-recorder dumps, show where ranks diverge
                        (--trace OUT.json: a Chrome/Perfetto timeline of the job)
  top      live view of a running job: each rank's call, for how long, who is behind;
           accord top -h (--once: one snapshot; --json; --store HOST:PORT)
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from .version import version

        print(f"accord {version()}")
        return 0
    command, rest = args[0], args[1:]
    if command == "bench":
        from .bench.cli import main as bench

        return bench(rest)
    if command in ("flight-recorder", "fr"):
        from .diagnostics.merge import main as merge

        return merge(rest)
    if command == "top":
        from .diagnostics.top import main as top

        return top(rest)
    if command == "config":
        from .config import describe

        describe()
        return 0
    print(f"accord: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
