"""Run torch's distributed suite on one backend:
``python run_suite.py BACKEND [--tests name,name…] [pytest args]``.

Sets WORLD_SIZE (default 2), TEMP_DIR (with its ``barrier/`` folder) and BACKEND as torch's
CI does for test_distributed_spawn.py, then runs ``distributed_suite.py`` under pytest in this
process. ``--tests`` runs only the named tests; other arguments (``-k``, ``--junitxml``) pass
through to pytest; the exit code is pytest's. BACKEND is gloo, accord, or accord-as-gloo (see
distributed_suite.py).
"""

from __future__ import annotations

import os
import sys
import tempfile


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    backend, rest = argv[0], argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    suite = os.path.join(here, "distributed_suite.py")
    targets = [suite]
    if "--tests" in rest:
        at = rest.index("--tests")
        names = rest[at + 1].split(",")
        rest = rest[:at] + rest[at + 2:]
        targets = [f"{suite}::TestDistBackendWithSpawn::{name}" for name in names]
    with tempfile.TemporaryDirectory(prefix="accord-torch-suite-") as temp:
        os.makedirs(os.path.join(temp, "barrier"), exist_ok=True)
        os.environ.update(BACKEND=backend, TEMP_DIR=temp, INIT_METHOD="env://",
                          WORLD_SIZE=os.environ.get("WORLD_SIZE", "2"))
        import pytest

        return int(pytest.main([*targets, "-p", "no:cacheprovider", "-o", "addopts=",
                                "--rootdir", here, "-q", *rest]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
