"""The jobs several modules' torch programs share (shared_jobs.py), as fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from . import shared_jobs


@pytest.fixture(scope="session")
def jobs() -> Any:
    """(backend, world size) → every rank's {label: result} of its shared job's plan:
    ``shared_jobs.PLANS[world size]``, and ``ACCORD_PLAN`` after it on accord at world 2."""
    return shared_jobs.results


@pytest.fixture(scope="session")
def accord_programs() -> Any:
    """label of ``shared_jobs.ACCORD_PLAN`` → every rank's result of that program (world 2,
    accord)."""
    return lambda label: [r[label] for r in shared_jobs.results("accord", 2)]
