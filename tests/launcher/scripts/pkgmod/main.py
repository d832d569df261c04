"""Run with ``-m pkgmod.main``: prints what ``python -m`` gives a module."""

import json
import os
import sys

print("MOD " + json.dumps({"argv": sys.argv, "name": __name__, "package": __package__,
                           "path0": sys.path[0], "rank": os.environ["RANK"]}))
