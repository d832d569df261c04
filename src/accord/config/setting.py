"""One environment variable accord reads: ``Setting`` (name, default, meaning, aliases), the
registry ``SETTINGS`` that ``config.describe`` prints, and the parsers any setting's value goes
through (integer, number, on/off), whose errors name the variable. Must not know any particular
variable."""

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


def env_int(setting: Setting) -> int | None:
    """An integer variable of the env:// contract; None when unset.

    Raises:
        ValueError: set but not an integer (the message names the variable).
    """
    raw = setting.raw()
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {setting.name}={raw!r} is not an integer") from None


def env_float(setting: Setting, minimum: float = 0.0) -> float:
    """A number of seconds (or any float) from ``setting``, else its default.

    Raises:
        ValueError: not a number, or below ``minimum`` (the message names the variable).
    """
    text = setting.raw() or setting.default
    assert text is not None, setting.name
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"environment variable {setting.name}={text!r} is not a number") from None
    if value < minimum:
        raise ValueError(f"environment variable {setting.name}={value:g} must be >= {minimum:g}")
    return value


def as_int(setting: Setting, minimum: int = 0) -> int:
    """An integer (any base Python's ``int(text, 0)`` reads) from ``setting``, else its default.

    Raises:
        ValueError: not an integer, or below ``minimum`` (the message names the variable).
    """
    raw = setting.raw()
    text = raw if raw is not None else setting.default
    assert text is not None, setting.name
    try:
        value = int(text, 0)
    except ValueError:
        raise ValueError(f"{setting.name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{setting.name}={value} must be >= {minimum}")
    return value


def is_on(setting: Setting) -> bool:
    """An on/off setting: off for 0, false, no or off (any case); on otherwise, and when unset."""
    return (setting.raw() or "1").lower() not in ("0", "false", "no", "off")
