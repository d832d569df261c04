import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _no_world_left_behind():
    """Every test leaves the process without a default world (and without accord env vars)."""
    yield
    import accord

    if accord.is_initialized():
        accord.destroy_process_group()
        pytest.fail("the test left a default process group initialized")
