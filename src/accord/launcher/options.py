"""accordrun's command line: torchrun's flags, spellings and defaults, turned into a LaunchConfig.

Owns: the argparse parser (dash and underscore spellings, ``PET_<OPTION>`` defaults as
torchrun), the workers' options and their value syntaxes (``--nproc-per-node auto``, ``-r``/``-t``
``0-3`` or ``local_rank:0-3,…``, ``--signals-to-handle``), and the checks that give a usage
error before anything starts. The options of nodes, rendezvous and restarts are
``elastic_options``'s. Must not know how workers are started or how nodes meet.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
from dataclasses import dataclass, field
from enum import IntFlag

from .. import config
from ..version import version
from .elastic_options import add_node_options, add_recovery_options, elastic_from_args

#: Options accepted so torchrun command lines run unchanged, but without effect here.
IGNORED = (
    "start_method",
    "event_log_handler",
    "logs_specs",
    "numa_binding",
    "duplicate_stdout_filters",
    "duplicate_stderr_filters",
    "virtual_local_rank",
)


class Std(IntFlag):
    """Which standard streams a redirect or tee applies to (torchrun's 0–3)."""

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3


@dataclass
class LaunchConfig:
    """Everything accordrun needs, resolved and checked."""

    entrypoint: str
    args: list[str]
    min_nodes: int = 1
    max_nodes: int = 1
    nproc_per_node: int = 1
    node_rank: int = 0
    rdzv_backend: str = "static"
    rdzv_host: str = "127.0.0.1"
    rdzv_port: int = 0
    run_id: str = "none"
    join_timeout: float = 600.0
    last_call_timeout: float = 30.0
    max_restarts: int = 0
    replace_workers: bool = False
    monitor_interval: float = 0.1
    role: str = "default"
    module: bool = False
    no_python: bool = False
    use_env: bool = True
    log_dir: str | None = None
    redirects: dict[int, Std] = field(default_factory=dict)
    tee: dict[int, Std] = field(default_factory=dict)
    local_ranks_filter: set[int] | None = None
    shutdown_timeout: float = 30.0
    signals: tuple[str, ...] = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")

    @property
    def nnodes(self) -> str:
        return (
            str(self.max_nodes) if self.min_nodes == self.max_nodes else f"{self.min_nodes}:{self.max_nodes}"
        )


class _EnvDefault(argparse.Action):
    """A valued option whose default may come from ``PET_<DEST>`` (torchrun's ``env``)."""

    def __init__(self, dest: str, default: object = None, **kwargs: object) -> None:
        env_value = config.launcher_option_default(dest)
        super().__init__(dest=dest, default=env_value if env_value is not None else default, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        setattr(namespace, self.dest, values)


class _EnvFlag(argparse.Action):
    """A flag that ``PET_<DEST>=1`` turns on (torchrun's ``check_env``)."""

    def __init__(self, dest: str, **kwargs: object) -> None:
        default = (config.launcher_option_default(dest) or "0") not in ("0", "")
        super().__init__(dest=dest, const=True, default=default, nargs=0, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        setattr(namespace, self.dest, True)


def _spellings(name: str) -> list[str]:
    dashed = f"--{name}"
    underscored = dashed[:2] + dashed[2:].replace("-", "_")
    return [dashed] if underscored == dashed else [dashed, underscored]


def _add(
    parser: argparse.ArgumentParser, name: str, text: str, *short: str, flag: bool = False, **kwargs: object
) -> None:
    action = _EnvFlag if flag else _EnvDefault
    parser.add_argument(*short, *_spellings(name), action=action, help=text, **kwargs)  # type: ignore[arg-type]


def _add_worker_options(parser: argparse.ArgumentParser) -> None:
    _add(parser, "role", "Role name of the workers (ROLE_NAME).", default="default")
    _add(parser, "module", "Run the entry point as 'python -m'.", "-m", flag=True)
    _add(parser, "no-python", "Execute the entry point directly, not with python.", flag=True)
    _add(parser, "run-path", "Accepted for torchrun compatibility: runs as a script.", flag=True)
    _add(parser, "log-dir", "Directory for the per-rank logs and error files.", default=None)
    _add(parser, "redirects", "Send streams to log files only: 0-3, or local_rank:0-3,…", "-r", default="0")
    _add(
        parser,
        "tee",
        "Send streams to log files and the console: 0-3, or local_rank:0-3,…",
        "-t",
        default="0",
    )
    _add(parser, "local-ranks-filter", "Show console output of these local ranks only, e.g. 0,1.", default="")
    _add(
        parser,
        "shutdown-timeout",
        "Seconds from SIGTERM to SIGKILL when stopping workers.",
        type=float,
        default=None,
    )
    _add(
        parser,
        "signals-to-handle",
        "Signals forwarded to the workers.",
        default="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    )
    for name in (
        "start-method",
        "event-log-handler",
        "logs-specs",
        "numa-binding",
        "duplicate-stdout-filters",
        "duplicate-stderr-filters",
    ):
        _add(parser, name, "Accepted for torchrun compatibility (no effect).", default=None)
    _add(parser, "virtual-local-rank", "Accepted for torchrun compatibility (no effect).", flag=True)


def get_args_parser(prog: str = "accordrun") -> argparse.ArgumentParser:
    """torchrun's parser, with accordrun's help texts."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Start a distributed job like torchrun: N workers per node with "
        "the torchrun environment, restarts, and a report naming the first failure.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s (accord) {version()}")
    add_node_options(parser, _add)
    _add(
        parser,
        "nproc-per-node",
        "Workers per node: an integer, 'auto' or 'cpu' (the CPUs this process may use).",
        default="1",
    )
    add_recovery_options(parser, _add)
    _add_worker_options(parser)
    parser.add_argument(
        "training_script",
        help="The script (or module with -m, or command "
        "with --no-python) each worker runs, followed by its arguments.",
    )
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def parse_nproc(text: str) -> int:
    """An integer, or 'auto'/'cpu': the number of CPUs this process may run on."""
    if text in ("auto", "cpu"):
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1
    if text in ("gpu", "xpu", "cuda"):
        raise ValueError(
            f"--nproc-per-node={text}: accord has no {text} support; give a number, 'auto' or 'cpu'"
        )
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--nproc-per-node={text!r}: expected an integer, 'auto' or 'cpu'") from None
    if value < 1:
        raise ValueError(f"--nproc-per-node={value}: need at least 1 worker")
    return value


def parse_std(text: str, option: str, nproc: int) -> dict[int, Std]:
    """torchrun's redirect/tee syntax: '3' for every local rank, or '0:3,1:1' per local rank."""
    if re.fullmatch(r"[0-3]", text):
        return {rank: Std(int(text)) for rank in range(nproc)}
    if re.fullmatch(r"(\d+:[0-3],)*\d+:[0-3]", text):
        return {int(r): Std(int(v)) for r, v in (item.split(":") for item in text.split(","))}
    raise ValueError(
        f"{option}={text!r}: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or "
        f"local_rank:0-3,… e.g. 0:3,1:1"
    )


def parse_local_ranks(text: str) -> set[int] | None:
    if not text:
        return None
    try:
        return {int(item) for item in text.split(",")}
    except ValueError:
        raise ValueError(f"--local-ranks-filter={text!r}: expected local ranks, e.g. 0,1") from None


def parse_signals(text: str) -> tuple[str, ...]:
    """'SIGTERM,SIGUSR1' → the names, checked: each must be a signal a handler can catch."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    bad = [
        name
        for name in names
        if name in ("SIGKILL", "SIGSTOP") or not isinstance(getattr(signal, name, None), signal.Signals)
    ]
    if bad:
        raise ValueError(
            f"--signals-to-handle={text!r}: {', '.join(bad)} cannot be handled "
            f"here; give catchable signal names, e.g. SIGTERM,SIGINT,SIGUSR1"
        )
    return names


def config_from_args(args: argparse.Namespace) -> LaunchConfig:
    """Check the parsed options and resolve torchrun's defaults.

    Raises:
        ValueError: a malformed or contradictory option (the message names it).
    """
    nproc = parse_nproc(str(args.nproc_per_node))
    elastic = elastic_from_args(args)
    if args.no_python and args.module:
        raise ValueError("Don't use both the '--no-python' flag and the '--module' flag")
    shutdown = args.shutdown_timeout
    shutdown = config.env_float(config.SHUTDOWN_TIMEOUT) if shutdown is None else float(shutdown)
    return LaunchConfig(
        entrypoint=args.training_script,
        args=list(args.training_script_args),
        min_nodes=elastic.min_nodes,
        max_nodes=elastic.max_nodes,
        nproc_per_node=nproc,
        node_rank=elastic.node_rank,
        rdzv_backend=elastic.rdzv_backend,
        rdzv_host=elastic.rdzv_host,
        rdzv_port=elastic.rdzv_port,
        run_id=elastic.run_id,
        join_timeout=elastic.join_timeout,
        last_call_timeout=elastic.last_call_timeout,
        max_restarts=elastic.max_restarts,
        replace_workers=elastic.replace_workers,
        monitor_interval=elastic.monitor_interval,
        role=args.role,
        module=args.module,
        no_python=args.no_python,
        use_env=getattr(args, "use_env", True),
        log_dir=args.log_dir,
        redirects=parse_std(args.redirects, "--redirects", nproc),
        tee=parse_std(args.tee, "--tee", nproc),
        local_ranks_filter=parse_local_ranks(args.local_ranks_filter),
        shutdown_timeout=max(shutdown, 0.0),
        signals=parse_signals(args.signals_to_handle),
    )


def ignored_options(args: argparse.Namespace) -> list[str]:
    """The torchrun options given that accordrun accepts without effect."""
    given = [name for name in IGNORED if getattr(args, name, None) not in (None, False)]
    return [f"--{name.replace('_', '-')}" for name in given]
