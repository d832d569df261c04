"""Run one program of ``programs`` on gloo, then on accord, and compare what every rank returned."""

from __future__ import annotations

from typing import Any

import pytest
from torch_backend import harness
from torch_backend.test_training import close

INSTALL = "pip install -e '.[frameworks]'"


def need(module: str, what: str) -> Any:
    """The framework's module, or a skip that says how to install it."""
    return pytest.importorskip(module, reason=f"{what} is not installed ({INSTALL})")


def on_both(program: str, world_size: int = 2, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    """Each rank's result on gloo and on accord (the harness's processes, env://)."""
    gloo = harness.run(f"frameworks.programs:{program}", "gloo", world_size, **kwargs)
    accord = harness.run(f"frameworks.programs:{program}", "accord", world_size, **kwargs)
    return gloo, accord


def assert_same(gloo: Any, accord: Any, *, ignore: tuple[str, ...] = ()) -> None:
    """Equal up to float rounding, rank by rank; keys in ``ignore`` are left out."""
    strip = (lambda r: {k: v for k, v in r.items() if k not in ignore}) if ignore else (lambda r: r)
    diffs = close([strip(r) for r in gloo], [strip(r) for r in accord])
    assert not diffs, "accord differs from gloo:\n" + "\n".join(diffs[:20])
