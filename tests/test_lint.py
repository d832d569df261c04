"""Static checks in CI: ``ruff check``, ``ruff format --check`` and ``mypy`` over ``src/``.

Their settings live in pyproject.toml ([tool.ruff], [tool.mypy]); docs/contributing.md says
why. Each test skips, saying so, when its tool is not installed (``pip install -e ".[test]"``
brings both), and fails with the tool's own report otherwise.

Directories not yet held to these checks (being refactored on other branches) are the one
list ``[tool.ruff] extend-exclude`` in pyproject.toml: ruff reads it itself, and the mypy test
below reads it to leave out findings in those files. Shorten that list to turn the checks on.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def not_yet_checked() -> list[str]:
    """Paths (relative to the repository root) that no static check holds yet."""
    return list(PYPROJECT["tool"]["ruff"].get("extend-exclude", []))


def _tool(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (it is in the test extra: pip install -e '.[test]')")


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def _report(what: str, proc: subprocess.CompletedProcess[str]) -> str:
    return f"{what}; exit status {proc.returncode}:\n{proc.stdout}{proc.stderr}"


def test_ruff_check() -> None:
    _tool("ruff")
    proc = _run("ruff", "check", "--no-cache", "--output-format", "concise", "src")
    assert proc.returncode == 0, _report("ruff check found problems (ruff check --fix src fixes some)", proc)


def test_ruff_format() -> None:
    _tool("ruff")
    proc = _run("ruff", "format", "--no-cache", "--check", "src")
    assert proc.returncode == 0, _report("ruff format would change these files (run: ruff format src)", proc)


@pytest.mark.timeout(600)  # a cold run over src/ and the torch stubs it reads: 15-60 s
def test_mypy() -> None:
    _tool("mypy")
    # What mypy concludes depends on the types it sees of the optional dependencies (and an
    # ignore that is needed with torch installed is an unused ignore without it): judge only
    # where CI's environment is, with every extra the test command installs.
    for extra in ("torch", "mpi4py"):
        if importlib.util.find_spec(extra) is None:
            pytest.skip(f"mypy runs only with the torch and mpi extras installed ({extra} is missing)")
    # mypy's own cache (.mypy_cache, ignored by git): a second run takes seconds
    proc = _run("mypy", "--no-error-summary", "--hide-error-context", timeout=590)
    if proc.returncode not in (0, 1) or proc.stderr.strip():
        pytest.fail(_report("mypy did not run", proc))
    skipped = tuple(path.rstrip("/") for path in not_yet_checked())
    findings = [
        line
        for line in proc.stdout.splitlines()
        if line.strip() and not _under(line.split(":", 1)[0], skipped)
    ]
    assert not findings, "mypy found problems:\n" + "\n".join(findings)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)
