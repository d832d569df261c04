"""``python -m accord.launch``: the legacy launcher, as ``torch.distributed.launch``.

Owns: the legacy differences only — each worker gets ``--local-rank=N`` before its own arguments
unless ``--use-env`` (then only the LOCAL_RANK variable, which accordrun always sets), and the
FutureWarning torch gives. Everything else is accordrun's (``accord.launcher``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from .launcher.cli import run
from .launcher.options import get_args_parser

DEPRECATION = (
    "The module accord.launch (like torch.distributed.launch) is deprecated and will "
    "be removed in future. Use accordrun.\nNote that --use-env is set by default in "
    "accordrun.\nIf your script expects `--local-rank` argument to be set, please\n"
    "change it to read from `os.environ['LOCAL_RANK']` instead."
)


def get_legacy_parser() -> argparse.ArgumentParser:
    parser = get_args_parser(prog="python -m accord.launch")
    parser.add_argument(
        "--use-env",
        "--use_env",
        default=False,
        action="store_true",
        help="Pass the local rank in LOCAL_RANK only, not as --local-rank=N.",
    )
    return parser


def main(args: Sequence[str] | None = None) -> int:
    warnings.warn(DEPRECATION, FutureWarning, stacklevel=2)
    parser = get_legacy_parser()
    parsed = parser.parse_args(args)
    if parsed.no_python and not parsed.use_env:
        parser.error("When using the '--no-python' flag, you must also set the '--use-env' flag.")
    return run(args, parser, local_rank_arg=not parsed.use_env)


if __name__ == "__main__":
    sys.exit(main())
