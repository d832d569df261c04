"""One environment variable accord reads: ``Setting`` (name, default, meaning, aliases) and the
registry ``SETTINGS`` that ``config.describe`` prints. Must not know any particular variable."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None
    doc: str
    aliases: tuple[str, ...] = ()
    secret: bool = False  # describe() shows whether it is set, never its value

    def raw(self) -> str | None:
        """The value from the environment (first of name, aliases), or None if unset/empty."""
        for key in (self.name, *self.aliases):
            value = os.environ.get(key)
            if value is not None and value.strip() != "":
                return value.strip()
        return None


SETTINGS: dict[str, Setting] = {}


def register(name: str, default: str | None, doc: str, aliases: tuple[str, ...] = ()) -> Setting:
    setting = Setting(name, default, doc, aliases)
    SETTINGS[name] = setting
    return setting


def describe(show: Callable[[str], None] = print) -> None:
    """Print every setting: name, aliases, default, current value and meaning."""
    for setting in SETTINGS.values():
        alias = f" (also {', '.join(setting.aliases)})" if setting.aliases else ""
        value = setting.raw()
        if setting.secret and value is not None:
            value = "<set, not shown>"
        show(f"{setting.name}{alias} = {value!r}  [default {setting.default!r}]")
        show(f"    {setting.doc}")
