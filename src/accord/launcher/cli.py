"""``accordrun`` (and ``python -m accord.run``): the command line entry point.

Owns: parsing the arguments (``options``), turning bad options into a usage error (exit 2),
warning about torchrun options that have no effect here, giving a one-node job its secret, and
handing the job to the ``Agent``.
Exit status as torchrun's: 0 when every worker succeeded, 1 otherwise (the report is on
stderr). Must not know how the job runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import auth
from .agent import Agent
from .options import config_from_args, get_args_parser, ignored_options
from .output import Console


def run(
    argv: Sequence[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    local_rank_arg: bool = False,
) -> int:
    """Parse ``argv`` and run the job; the exit status. ``local_rank_arg`` passes each worker
    ``--local-rank=N`` (the legacy launcher)."""
    parser = parser or get_args_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    console = Console()
    made_secret = give_job_a_secret(cfg.max_nodes, cfg.rdzv_host)
    for option in ignored_options(args):
        console.say(f"accordrun: {option} is accepted for torchrun compatibility and has no effect here.")
    return Agent(cfg, console, local_rank_arg=local_rank_arg, made_secret=made_secret).run()


def give_job_a_secret(max_nodes: int, store_host: str) -> bool:
    """A job on this node alone (its store on loopback) gets a fresh secret unless the user
    gave one: this process and every worker prove it on each store and rank-to-rank
    connection (torch programs' store clients, which cannot, are admitted as this launcher's
    descendants: see ``admission``). A multi-node job uses the secret the user sets.
    Whether it made one (the job file then has it, for ``accord top``)."""
    if max_nodes != 1 or not auth.is_loopback(store_host):
        return False
    if auth.SECRET.raw() is None and auth.SECRET_FILE.raw() is None:
        os.environ[auth.SECRET.name] = auth.new_secret()
        return True
    return False


def main(argv: Sequence[str] | None = None) -> None:
    """The ``accordrun`` console script."""
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
