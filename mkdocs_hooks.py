"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

``<!-- config-table -->`` in a page becomes the table of every environment variable accord
reads, generated from ``accord.config.SETTINGS`` at build time, so the reference cannot drift
from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- config-table -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def config_table() -> str:
    src = str(Path(__file__).resolve().parent / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    from accord.config import SETTINGS

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for setting in SETTINGS.values():
        names = ", ".join(f"`{name}`" for name in (setting.name, *setting.aliases))
        default = "—" if setting.default is None else f"`{setting.default}`"
        rows.append(f"| {names} | {default} | {_cell(setting.doc)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, config_table())
    return markdown
