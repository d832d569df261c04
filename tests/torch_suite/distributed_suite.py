"""torch's own distributed test suite (``distributed_test.py`` from the installed wheel), set up
the way torch's ``test/distributed/test_distributed_spawn.py`` runs it, for BACKEND=gloo or
BACKEND=accord. Run it through ``run_suite.py`` (which sets the environment); importing it
without BACKEND defines no tests.

For accord, the backend is declared to support what the suite gates on ("ddp", "subgroup",
"plugin"). Each test spawns WORLD_SIZE processes, which import this module again: the
declarations happen at import, so they hold in the children too.

BACKEND=accord-as-gloo runs the tests the suite gates on the backend being named "gloo" on
accord: the suite is imported as for gloo (its decorators see "gloo"), then its BACKEND is set
to "accord", which is what init_process_group gets.
"""

from __future__ import annotations

import os

if os.environ.get("BACKEND") and os.environ.get("WORLD_SIZE") and os.environ.get("TEMP_DIR"):
    as_gloo = os.environ["BACKEND"] == "accord-as-gloo"
    if as_gloo:
        os.environ["BACKEND"] = "gloo"  # children inherit it: they import for gloo too
        os.environ["ACCORD_SUITE_AS_GLOO"] = "1"
    as_gloo = as_gloo or os.environ.get("ACCORD_SUITE_AS_GLOO") == "1"
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import DistTestCases

    if os.environ["BACKEND"] == "accord" or as_gloo:
        if "ACCORD" not in dist.Backend._plugins:  # the entry point was disabled
            from accord.integrations.torch import register

            register()
        for feature in ("ddp", "subgroup", "plugin"):
            DistTestCases.backend_feature[feature].add("accord")

    from torch.testing._internal.distributed import distributed_test
    from torch.testing._internal.distributed.distributed_test import (DistributedTest,
                                                                      TestDistBackend)

    if as_gloo:
        distributed_test.BACKEND = "accord"  # what the tests' init_process_group uses

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self) -> None:
            super().setUp()
            self._spawn_processes()
