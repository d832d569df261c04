"""The package as it would be published: ``python -m build`` makes an sdist and a wheel that
``twine check --strict`` accepts, each holding what it should and nothing stray; the wheel,
installed into a fresh venv, runs the demo under its own ``accordrun``; ``accord --version``,
``accordrun --version`` and ``accord.__version__`` say pyproject.toml's version.

Needs ``build`` and ``twine`` (the test extra); the install test needs pip to reach numpy (a
registry or pip's cache). About 10 s on 2 cores: the build runs once, without isolation when
setuptools >= 77 is installed (3 s, against 12 s for an isolated build that installs
setuptools twice), and the fresh venv has no pip of its own (this pip installs into it).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile

import pytest

from accord.version import source_tree_version, version

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: What goes into the copy that is built (the checkout itself is never written to).
TREE = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in", "src", "tests", "examples",
        "docs")
CACHES = shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.egg-info", ".hypothesis", ".mypy_cache",
                                ".ruff_cache", ".pytest_cache", "build", "dist")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)["project"]["version"]
    found = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)  # Python 3.10: no tomllib
    assert found is not None
    return found.group(1)


VERSION = _pyproject_version()


def _run(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _needs(*modules: str) -> None:
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: pip install -e '.[test]' brings them")


def _setuptools_fits() -> bool:
    """Whether this environment can build without isolation (pyproject's build requirement)."""
    try:
        from importlib.metadata import version as installed

        major = int(installed("setuptools").split(".")[0])
    except Exception:  # noqa: BLE001 — not installed, or a version we cannot read: isolate
        return False
    return major >= 77


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, pathlib.Path]:
    """sdist and wheel of a copy of the checkout; the copy's paths under "tree"."""
    _needs("build", "twine")
    tree = tmp_path_factory.mktemp("tree")
    for name in TREE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=CACHES)
        else:
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("dist")
    isolation = ["--no-isolation"] if _setuptools_fits() else []
    _run([sys.executable, "-m", "build", *isolation, "--outdir", str(out), str(tree)], timeout=240)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel, "tree": tree}


def test_version_is_pyprojects():
    assert version() == VERSION
    import accord

    assert accord.__version__ == VERSION


def test_source_tree_version_reads_only_accords_pyproject(tmp_path):
    path = tmp_path / "pyproject.toml"
    assert source_tree_version(path) is None  # no file
    path.write_text('[project]\nname = "other"\nversion = "9.9"\n')
    assert source_tree_version(path) is None
    path.write_text('[tool.x]\nversion = "1"\n\n[project]\nname = "accord"\nversion = "2.3.4"\n\n[tool.y]\n'
                    'version = "5"\n')
    assert source_tree_version(path) == "2.3.4"


def test_version_commands_from_the_source_tree():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    accord = _run([sys.executable, "-m", "accord.cli", "--version"], timeout=60, env=env)
    assert accord.stdout.split() == ["accord", VERSION]
    accordrun = _run([sys.executable, "-m", "accord.run", "--version"], timeout=60, env=env)
    assert accordrun.stdout.split()[-1] == VERSION and accordrun.stdout.startswith("accordrun")


def test_twine_accepts_both(dists):
    done = _run([sys.executable, "-m", "twine", "check", "--strict", str(dists["sdist"]), str(dists["wheel"])],
                timeout=120)
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_wheel_holds_the_package_and_nothing_stray(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = f"accord-{VERSION}.dist-info"
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
        metadata = wheel.read(f"{info}/METADATA").decode()
    assert dists["wheel"].name == f"accord-{VERSION}-py3-none-any.whl"
    assert {name.split("/")[0] for name in names} == {"accord", "_accord_torch_entry.py", info}
    sources = {str(path.relative_to(ROOT / "src")) for path in (ROOT / "src").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert {name for name in names if name.endswith(".py")} == sources  # every module, a subpackage too
    assert "accord/py.typed" in names and f"{info}/licenses/LICENSE" in names
    assert not [name for name in names if name.endswith((".pyc", ".so")) or "/tests/" in name]
    assert re.search(r"^\[torch\.backends\]\naccord = _accord_torch_entry:register$", entry_points, re.MULTILINE)
    assert "accord = accord.cli:main" in entry_points and "accordrun = accord.launcher.cli:main" in entry_points
    assert f"\nVersion: {VERSION}\n" in metadata and "\nLicense-Expression: BSD-3-Clause\n" in metadata
    for label in ("Homepage", "Documentation", "Changelog", "Issues"):
        assert f"\nProject-URL: {label}, https://" in metadata
    for python in PYTHONS:
        assert f"\nClassifier: Programming Language :: Python :: {python}\n" in metadata
    assert "\nClassifier: Typing :: Typed\n" in metadata and "\nRequires-Dist: numpy" in metadata


def test_sdist_holds_what_a_packager_needs(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "src/accord/py.typed",
                 "src/_accord_torch_entry.py", "examples/demo.py", "tests/conftest.py", "tests/harness.py",
                 "tests/test_package.py", "docs/architecture.md"):
        assert name in names, name
    tracked_tests = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("*.py")
                     if "__pycache__" not in path.parts}
    assert tracked_tests <= names  # the whole suite, subdirectories too
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_changelog_has_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d\d-\d\d$", changelog, re.MULTILINE)
    assert re.search(rf"^\[{re.escape(VERSION)}\]: https://", changelog, re.MULTILINE)


def _fresh_venv(path: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """A venv and the pip command that installs into it. With pip >= 22.3 here, the venv has
    no pip of its own and this pip installs into it (``--python``), which saves ensurepip's 6 s."""
    from importlib.metadata import version as installed

    ours = tuple(int(part) for part in re.findall(r"\d+", installed("pip"))[:2])
    venv.create(path, with_pip=ours < (22, 3), symlinks=True)
    python = str(path / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python] if ours >= (22, 3) else [python, "-m", "pip"]
    return path / "bin", pip


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_wheel_in_a_fresh_venv_runs_the_demo(dists, tmp_path):
    bin_dir, pip = _fresh_venv(tmp_path / "venv")
    # PYTHONPATH and the like are left out of every step, the install too: a pip that sees a
    # checkout's accord on PYTHONPATH takes the wheel's requirement as already satisfied.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not key.startswith("ACCORD_")}
    _run([*pip, "install", "--disable-pip-version-check", "-q", str(dists["wheel"])], timeout=240, env=env)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    work = tmp_path / "elsewhere"  # not the checkout: accord must come from the venv
    work.mkdir()

    def run(*argv: str, timeout: float = 60) -> str:
        return _run(list(argv), timeout=timeout, env=env, cwd=work).stdout

    where = run(str(bin_dir / "python"), "-c", "import accord; print(accord.__file__); print(accord.__version__)")
    location, reported = where.split()
    assert pathlib.Path(location).resolve().is_relative_to((tmp_path / "venv").resolve()), location
    assert reported == VERSION
    assert run(str(bin_dir / "accord"), "--version").split() == ["accord", VERSION]
    assert run(str(bin_dir / "accordrun"), "--version").split()[-1] == VERSION
    # torch finds the backend through this entry point; without torch, register() does nothing
    probe = ("from importlib.metadata import entry_points; (ep,) = entry_points(group='torch.backends'); "
             "ep.load()(); print(ep.name, ep.value)")
    assert run(str(bin_dir / "python"), "-c", probe).split() == ["accord", "_accord_torch_entry:register"]
    demo = run(str(bin_dir / "accordrun"), "--nproc-per-node", "2", str(dists["tree"] / "examples" / "demo.py"),
               timeout=120)
    for rank in (0, 1):
        assert re.search(rf"rank {rank}/2: all_reduce → \[4, 6\], broadcast from rank 1 → 1", demo), demo
    assert "ring token → 2" in demo, demo
