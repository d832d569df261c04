"""``accordrun`` (and ``python -m accord.run``): the command line entry point.

Owns: parsing the arguments (``options``), turning bad options into a usage error (exit 2),
warning about torchrun options that have no effect here, and handing the job to the ``Agent``.
Exit status as torchrun's: 0 when every worker succeeded, 1 otherwise (the report is on
stderr). Must not know how the job runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .agent import Agent
from .options import config_from_args, get_args_parser, ignored_options
from .output import Console


def run(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None,
        local_rank_arg: bool = False) -> int:
    """Parse ``argv`` and run the job; the exit status. ``local_rank_arg`` passes each worker
    ``--local-rank=N`` (the legacy launcher)."""
    parser = parser or get_args_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    console = Console()
    for option in ignored_options(args):
        console.say(f"accordrun: {option} is accepted for torchrun compatibility and has no "
                    f"effect here.")
    return Agent(cfg, console, local_rank_arg=local_rank_arg).run()


def main(argv: Sequence[str] | None = None) -> None:
    """The ``accordrun`` console script."""
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
