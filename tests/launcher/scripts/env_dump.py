"""Print the launcher's environment contract, argv and __main__ facts as one JSON line per rank
(stdout), and one line on stderr. No accord import: it runs in a fraction of a second."""

import json
import os
import sys

KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS"]

facts = {key: os.environ.get(key) for key in KEYS}
facts.update(argv=sys.argv, name=__name__, file=__file__, path0=sys.path[0],
             main_is_me=sys.modules["__main__"].__dict__ is globals())
print("ENV " + json.dumps(facts))
print(f"stderr line of rank {os.environ['RANK']}", file=sys.stderr)
