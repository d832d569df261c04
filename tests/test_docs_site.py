"""The documentation site (``mkdocs.yml``, ``docs/``) builds without a warning, and the Python
snippets of its pages and of the README run.

Snippets: every fenced ``python`` block of ``docs/**/*.md`` and ``README.md``. The line before
a block may say how to run it, in an HTML comment (the site does not show it):

* nothing: a script in a fresh process, world 1 through env:// (``RANK=0``, ``WORLD_SIZE=1``,
  ``MASTER_ADDR``/``MASTER_PORT`` on loopback);
* ``<!-- snippet: ranks=N -->``: under ``accordrun --standalone --nproc-per-node N``;
* ``<!-- snippet: mpi ranks=N -->``: under ``mpiexec -n N`` (skipped without mpi4py and mpiexec);
* ``torch`` among the words: skipped without torch;
* ``<!-- snippet: skip (why) -->``: not run. Skips are counted per page (``EXPECTED_SKIPS``), so
  that skipping cannot grow silently: a new skip must be added there, with its page.

A snippet passes when its process (every rank) exits 0; snippets check their own results
with ``assert``. The build runs ``mkdocs build --strict`` into a temporary directory, so a
broken link, an anchor that does not exist, a page missing from the docs directory or a
docstring that mkdocstrings cannot render fails it; it skips, saying so, without mkdocs
(``pip install -e ".[test]"`` brings it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]

#: skipped snippets per page (relative to the repository root); a page not named has none
EXPECTED_SKIPS = {
    "docs/quickstart.md": 1,
    "docs/guides/torch.md": 1,
    "docs/guides/cuda.md": 1,
    "docs/guides/membership.md": 1,
    "docs/guides/frameworks.md": 7,  # each recipe is run by its test in tests/frameworks
}

_MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<words>.*?)\s*-->\s*$")
_OPEN = re.compile(r"^(?P<indent>\s*)```python\s*$")
_TIMEOUT_S = 60


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    code: str
    words: str  # the marker's text ("" without one)

    @property
    def skipped(self) -> bool:
        return self.words.startswith("skip")

    @property
    def ranks(self) -> int:
        found = re.search(r"\branks=(\d+)", self.words)
        return int(found.group(1)) if found else 1

    @property
    def needs(self) -> set[str]:
        return set(self.words.split()) & {"torch", "mpi"}

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def snippets_of(path: Path) -> list[Snippet]:
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        start, indent = i, len(opening.group("indent"))
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        before = next((line for line in reversed(lines[:start]) if line.strip()), "")
        marker = _MARKER.match(before.strip())
        found.append(Snippet(page, start + 1, "\n".join(body) + "\n", marker.group("words") if marker else ""))
        i += 1
    return found


SNIPPETS = [s for path in PAGES for s in snippets_of(path)]
RUN = [s for s in SNIPPETS if not s.skipped]


def test_skipped_snippets_are_the_expected_ones() -> None:
    counts: dict[str, int] = {}
    for s in SNIPPETS:
        if s.skipped:
            assert re.match(r"skip \(.+\)$", s.words), f"{s.id}: say why it is skipped: skip (why)"
            counts[s.page] = counts.get(s.page, 0) + 1
    assert counts == EXPECTED_SKIPS, (
        "skipped snippets per page changed; make the new ones run (see this module's docstring) "
        "or update EXPECTED_SKIPS"
    )
    assert len(RUN) >= 10, f"only {len(RUN)} snippets run: did the extraction break?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpiexec() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return None
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "ACCORD_FLIGHT_RECORDER_DIR": "off"}


@pytest.mark.multiprocess
@pytest.mark.parametrize("snippet", RUN, ids=[s.id for s in RUN])
def test_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    if "torch" in snippet.needs and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch: pip install -e '.[torch]'")
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code)
    env = _env()
    if "mpi" in snippet.needs:
        mpiexec = _mpiexec()
        if mpiexec is None:
            pytest.skip("needs mpi4py and mpiexec: pip install -e '.[mpi]'")
        command = [mpiexec, "-n", str(snippet.ranks), sys.executable, str(script)]
    elif snippet.ranks > 1:
        command = [sys.executable, "-m", "accord.run", "--standalone",
                   "--nproc-per-node", str(snippet.ranks), str(script)]
    else:
        command = [sys.executable, str(script)]
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(_free_port()))
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S)
    assert done.returncode == 0, (
        f"the snippet at {snippet.id} failed (exit status {done.returncode}):\n"
        f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )


def test_site_builds_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (it is in the test extra: pip install -e '.[test]')")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env={**_env(), "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"},
        capture_output=True, text=True, timeout=300,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{report[-6000:]}"
    warnings = [line for line in report.splitlines() if line.startswith("WARNING")]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "reference" / "collectives" / "index.html").exists()
