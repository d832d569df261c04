"""Diagnostics: what makes a failure explain itself.

Owns: the debug level (``debug``), where each rank is on each group and the stuck report built
from it (``progress``), the flight-recorder dumps, SIGUSR1 and the merge CLI
(``flight_recorder``, ``merge``), the per-world monitor that ties them to a failing group and
keeps the communication statistics (``monitor``), fail-fast on uncaught exceptions
(``fail_fast``) and the DETAIL argument check (``detail``). Sits beside ``api`` and ``world``:
it may use the group layer and stores, never the launcher.
"""
