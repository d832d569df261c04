"""The bootstrap every accordrun worker runs first: die with the launcher, record the traceback.

Owns: tying the worker's life to the launcher's (``PR_SET_PDEATHSIG``: SIGKILL when the launcher
dies, even by SIGKILL), writing an uncaught exception to ``TORCHELASTIC_ERROR_FILE`` in
torchrun's JSON format without any ``@record`` in user code, and then running the user's
target exactly as ``python script.py`` / ``python -m module`` would (``sys.argv``, ``__main__``,
``sys.path[0]``, ``__file__``; tracebacks show the user's frames only) — or, with --no-python,
exec'ing the command. Must not know anything else about accord.

It is run by path, not imported from the package, and uses the standard library only: importing
``accord`` would cost every worker the whole package (and NumPy) before its script starts::

    python -u …/accord/launcher/worker.py --parent PID [-m] TARGET [ARG …]
    python -S …/accord/launcher/worker.py --parent PID --exec COMMAND [ARG …]

The error file, as torchrun's ErrorHandler writes it::

    {"message": {"message": "ValueError: boom",
                 "extraInfo": {"py_callstack": "Traceback …", "timestamp": "1718000000"}}}
"""

import os
import sys
from types import TracebackType

del sys.path[0]  # the launcher's directory: nothing in it may shadow a module the user imports

_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_HIDDEN = {os.path.abspath(__file__), "<frozen runpy>"}


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL us when the launcher dies; exit if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


def write_error_file(message: str, callstack: str) -> None:
    """Write torchrun's error-file JSON to TORCHELASTIC_ERROR_FILE, if it is set."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")  # config.TORCHELASTIC_ERROR_FILE
    if not path:
        return
    import json
    import time

    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(f"{path}.tmp", path)
    except OSError as exc:
        print(f"accordrun worker: could not write the error file {path}: {exc}", file=sys.stderr)


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the leading frames of this bootstrap and of runpy."""
    import runpy

    hidden = _HIDDEN | {os.path.abspath(runpy.__file__)}
    while tb is not None and tb.tb_frame.f_code.co_filename in hidden:
        tb = tb.tb_next
    return tb


def _record(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> TracebackType | None:
    import traceback

    tb = _user_frames(tb)
    text = "".join(traceback.format_exception(kind, value, tb))
    if not issubclass(kind, KeyboardInterrupt):
        line = traceback.format_exception_only(kind, value)[-1].strip()
        write_error_file(line, text)
    return tb


def _install_excepthook() -> None:
    import faulthandler

    faulthandler.enable(all_threads=True)
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:  # noqa: ANN001
        tb = _record(kind, value, tb)
        if isinstance(value, BaseException):
            value = value.with_traceback(tb)  # the default hook prints __traceback__
        previous(kind, value, tb)

    sys.excepthook = hook


def _missing(target: str, module: bool) -> str | None:
    """Python's own message when the target cannot be run, else None."""
    if module:
        import importlib.util

        try:
            found = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            return (
                f"{sys.executable}: Error while finding module specification for "
                f"{target!r} ({type(exc).__name__}: {exc})"
            )
        return None if found is not None else f"{sys.executable}: No module named {target}"
    if os.path.exists(target):
        return None
    return (
        f"{sys.executable}: can't open file {os.path.abspath(target)!r}: [Errno 2] No such file or directory"
    )


def _run_file(target: str) -> None:
    """``python target``: the code runs as a fresh ``__main__`` module that stays in
    sys.modules (runpy.run_path would rewrite argv[0] and restore the old ``__main__``)."""
    import builtins
    import importlib.machinery
    import types

    path = os.path.abspath(target)
    with open(path, "rb") as handle:
        code = compile(handle.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __builtins__=builtins,
        __cached__=None,
        __package__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
    )
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _run_python(target: str, args: list, module: bool) -> None:
    """Run ``target`` as ``python [-m] target args`` would, in this interpreter."""
    import builtins
    import runpy

    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.realpath(target)))
    problem = _missing(target, module)
    if problem is not None:
        print(problem, file=sys.stderr)
        write_error_file(problem, problem)
        sys.exit(1 if module else 2)
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, {"__builtins__": builtins}, "__main__", alter_sys=True)
        elif os.path.isfile(target):
            _run_file(target)
        else:  # a directory or zip file with __main__.py
            runpy.run_path(target, {"__builtins__": builtins}, "__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _record(SystemExit, exc, exc.__traceback__)
        raise


def _exec(command: str, args: list) -> None:
    try:
        os.execvp(command, [command, *args])
    except OSError as exc:
        problem = f"{type(exc).__name__}: cannot execute {command!r}: {exc.strerror or exc}"
        print(f"accordrun worker: {problem}", file=sys.stderr)
        write_error_file(problem, problem)
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def main(argv: list) -> None:
    if len(argv) < 4 or argv[1] != "--parent":
        sys.exit("usage: worker.py --parent PID [-m | --exec] TARGET [ARG ...] (started by accordrun)")
    _die_with_parent(int(argv[2]))
    mode, rest = (argv[3], argv[4:]) if argv[3] in ("-m", "--exec") else ("", argv[3:])
    if not rest:
        sys.exit("accordrun worker: no target to run")
    if mode == "--exec":
        _exec(rest[0], rest[1:])
    _install_excepthook()
    _run_python(rest[0], rest[1:], module=mode == "-m")


if __name__ == "__main__":
    main(sys.argv)
