"""accord's version, whose one home is ``pyproject.toml`` (``[project] version``).

Owns: finding it at run time. In a source tree (``src/accord`` beside the project's
``pyproject.toml``, run through PYTHONPATH or installed editable) the file itself is read, so a
checkout always reports its own version; an installed wheel reports its distribution's
metadata (importlib.metadata). Must not know anything else about packaging.
"""

from __future__ import annotations

import re
from pathlib import Path

DISTRIBUTION = "accord"
UNKNOWN = "0+unknown"  # neither a source tree nor an installed distribution (a PEP 440 local version)


def version() -> str:
    """The version of this copy of accord, e.g. ``"0.1.0"``."""
    found = source_tree_version(Path(__file__).resolve().parents[2] / "pyproject.toml")
    return found if found is not None else installed_version()


def source_tree_version(pyproject: Path) -> str | None:
    """``[project] version`` of ``pyproject`` if it is accord's; None when there is none.

    A small scan, not a TOML parser (tomllib is Python 3.11+): the ``[project]`` table up to the
    next table header, its ``name`` and ``version`` keys as plain strings."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    table = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    if table is None:
        return None
    name = re.search(r'^name\s*=\s*"([^"]*)"', table.group(1), re.MULTILINE)
    found = re.search(r'^version\s*=\s*"([^"]*)"', table.group(1), re.MULTILINE)
    if name is None or name.group(1) != DISTRIBUTION or found is None:
        return None
    return found.group(1)


def installed_version() -> str:
    """The installed distribution's version; ``UNKNOWN`` without one."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN
