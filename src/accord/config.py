"""Every environment variable accord reads, in one place, with its default and meaning.

Owns: the names, parsing and documentation of environment variables. Nothing else in accord
reads ``os.environ``, except the launcher, which *writes* the worker contract. Values are read
at call time, so tests can set them with ``monkeypatch.setenv``.

``python -m accord.config`` prints the table below with the values seen now.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None
    doc: str
    aliases: tuple[str, ...] = ()

    def raw(self) -> str | None:
        """The value from the environment (first of name, aliases), or None if unset/empty."""
        for key in (self.name, *self.aliases):
            value = os.environ.get(key)
            if value is not None and value.strip() != "":
                return value.strip()
        return None


SETTINGS: dict[str, Setting] = {}


def _setting(name: str, default: str | None, doc: str, aliases: tuple[str, ...] = ()) -> Setting:
    setting = Setting(name, default, doc, aliases)
    SETTINGS[name] = setting
    return setting


# -- the torchrun / env:// contract (read by rendezvous) ---------------------------------------
MASTER_ADDR = _setting("MASTER_ADDR", None, "env:// rendezvous: host of the rank-0 TCPStore.")
MASTER_PORT = _setting("MASTER_PORT", None, "env:// rendezvous: port of the rank-0 TCPStore.")
RANK = _setting("RANK", None, "env:// rendezvous: this process's global rank.")
WORLD_SIZE = _setting("WORLD_SIZE", None, "env:// rendezvous: number of processes in the job.")
LOCAL_RANK = _setting("LOCAL_RANK", None, "Rank of this process on its host (set by launchers).")
LOCAL_WORLD_SIZE = _setting("LOCAL_WORLD_SIZE", None, "Number of processes on this host (launchers).")
TORCHELASTIC_RUN_ID = _setting(
    "TORCHELASTIC_RUN_ID", None, "Set by torchrun/accordrun; makes is_torchelastic_launched() true."
)

# -- transport ---------------------------------------------------------------------------------
SOCKET_IFNAME = _setting(
    "ACCORD_SOCKET_IFNAME",
    None,
    "Network interface whose IPv4 address the TCP transport binds and publishes "
    "(e.g. eth0). Default: the address this host uses to reach the store.",
    aliases=("GLOO_SOCKET_IFNAME",),
)
TCP_BUFFER_BYTES = _setting(
    "ACCORD_TCP_BUFFER_BYTES", str(4 << 20), "SO_SNDBUF/SO_RCVBUF requested for transport sockets."
)

# -- algorithms --------------------------------------------------------------------------------
ALGORITHM = _setting(
    "ACCORD_ALGORITHM",
    None,
    "Force algorithms by collective, e.g. 'all_reduce=ring,broadcast=binomial'. "
    "Unknown names raise an error listing the known ones.",
)
SEGMENT_BYTES = _setting(
    "ACCORD_SEGMENT_BYTES",
    str(1 << 20),
    "Pipelining segment of the bandwidth algorithms (ring all_reduce, pipelined broadcast).",
)
SMALL_MESSAGE_BYTES = _setting(
    "ACCORD_SMALL_MESSAGE_BYTES",
    str(64 << 10),
    "At or below this size the latency algorithms are chosen (recursive doubling, binomial tree).",
)


def _as_int(setting: Setting, minimum: int = 0) -> int:
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


def tcp_buffer_bytes() -> int:
    return _as_int(TCP_BUFFER_BYTES, minimum=4096)


def segment_bytes() -> int:
    return _as_int(SEGMENT_BYTES, minimum=1)


def small_message_bytes() -> int:
    return _as_int(SMALL_MESSAGE_BYTES, minimum=0)


def socket_ifname() -> str | None:
    return SOCKET_IFNAME.raw()


def algorithm_overrides() -> dict[str, str]:
    """ACCORD_ALGORITHM parsed into {collective: algorithm name}."""
    raw = ALGORITHM.raw()
    if raw is None:
        return {}
    overrides: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        collective, sep, name = item.partition("=")
        if not sep or not collective.strip() or not name.strip():
            raise ValueError(
                f"ACCORD_ALGORITHM={raw!r}: expected 'collective=algorithm[,…]', got {item!r}"
            )
        overrides[collective.strip()] = name.strip()
    return overrides


@dataclass(frozen=True)
class Tunables:
    """The algorithm settings a process group reads once, when it is created."""

    segment_bytes: int
    small_message_bytes: int
    algorithms: dict[str, str]

    @classmethod
    def from_env(cls) -> Tunables:
        return cls(segment_bytes(), small_message_bytes(), algorithm_overrides())


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


def describe(show: Callable[[str], None] = print) -> None:
    """Print every setting: name, aliases, default, current value and meaning."""
    for setting in SETTINGS.values():
        alias = f" (also {', '.join(setting.aliases)})" if setting.aliases else ""
        show(f"{setting.name}{alias} = {setting.raw()!r}  [default {setting.default!r}]")
        show(f"    {setting.doc}")


if __name__ == "__main__":
    describe()
