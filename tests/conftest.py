import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="run the long variants (many repetitions, soak; torch's own suite): "
                          "CI runs a representative slice of each without it")
    parser.addoption("--frameworks", action="store_true", default=False,
                     help="run the framework recipes of docs/guides/frameworks.md on backend accord "
                          "and on gloo (Lightning, Ray Train, accelerate, transformers TP, DCP; "
                          "pip install the extra 'frameworks'): CI runs the pipelining one without it")


def pytest_configure(config):
    if config.getoption("--long"):  # one switch for the tests that read the variable too
        os.environ["ACCORD_LONG_TESTS"] = "1"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``frameworks`` run only with ``--frameworks``."""
    if config.getoption("--frameworks"):
        return
    skip = pytest.mark.skip(reason="a framework recipe: run it with pytest --frameworks")
    for item in items:
        if item.get_closest_marker("frameworks") is not None:
            item.add_marker(skip)


@pytest.fixture
def long_run(request) -> bool:
    """Whether the long variants were asked for (``pytest --long`` or ACCORD_LONG_TESTS=1)."""
    return bool(request.config.getoption("--long")) or os.environ.get("ACCORD_LONG_TESTS") == "1"


@pytest.fixture(autouse=True)
def _no_world_left_behind():
    """Every test leaves the process without a default world (and without accord env vars)."""
    yield
    import accord

    if accord.is_initialized():
        accord.destroy_process_group()
        pytest.fail("the test left a default process group initialized")


def _private_flight_recorder_dir() -> None:
    """Failure tests dump flight recorders: into one directory of this session, not /tmp's."""
    import atexit
    import shutil
    import tempfile

    if "ACCORD_FLIGHT_RECORDER_DIR" not in os.environ:
        path = tempfile.mkdtemp(prefix="accord-fr-tests-")
        os.environ["ACCORD_FLIGHT_RECORDER_DIR"] = path
        atexit.register(shutil.rmtree, path, True)


_private_flight_recorder_dir()
