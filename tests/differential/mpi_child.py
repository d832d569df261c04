"""A rank of an ``accord-mpi`` differential job, started by mpiexec (see runner.py).

It connects to the parent's listener (ACCORD_DIFF_ADDRESS, ACCORD_DIFF_KEY), says its MPI
rank, then runs the scripts of ACCORD_DIFF_NAMES on backend "mpi" as every other child does.
"""

from __future__ import annotations

import os
from multiprocessing.connection import Client

from . import runner
from . import scripts_docs, scripts_errors, scripts_rooted_exchanges  # noqa: F401 — they add their scripts


def main() -> None:
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    host, port = os.environ["ACCORD_DIFF_ADDRESS"].rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ["ACCORD_DIFF_KEY"]))
    conn.send(rank)
    names = [n for n in os.environ["ACCORD_DIFF_NAMES"].split(",") if n]
    runner.run_scripts(runner.IMPLEMENTATIONS[os.environ["ACCORD_DIFF_IMPL"]], rank, size, names, conn)


if __name__ == "__main__":
    main()
