"""``python -m accord.run``: the same as ``accordrun`` (torch's ``python -m torch.distributed.run``).

Owns nothing: the launcher lives in ``accord.launcher``; this module only gives it torch's
module name, with torch's ``main``, ``run``, ``parse_args`` and ``get_args_parser``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .launcher.cli import main, run
from .launcher.options import get_args_parser


def parse_args(args: Sequence[str] | None = None) -> argparse.Namespace:
    return get_args_parser().parse_args(args)


__all__ = ["get_args_parser", "main", "parse_args", "run"]

if __name__ == "__main__":
    main()
