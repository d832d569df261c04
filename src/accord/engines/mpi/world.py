"""``init_process_group("mpi")``: the parts of a world whose groups run on MPI communicators.

Owns: finding the ranks (MPI's, not MASTER_ADDR/PORT: no store is needed), the clear errors
when the program was not started by an MPI launcher or disagrees with it, the default group
on a duplicate of MPI_COMM_WORLD (a program's own mpi4py calls never meet accord's), the
diagnostics store (a TCPStore on rank 0, found through MPI, for the stuck report's progress
board; the user's ``store=`` instead when given), and the exception hook that ends the MPI
job when a rank dies of an uncaught exception, so that its peers do not wait for it
(armed while the world's default group lives). The API builds the world from these parts
(``group.engine.WorldParts``), as it builds accord's own. Must not know about the API, the
world, the diagnostics or the launcher.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import warnings
from datetime import timedelta
from typing import Any

from ... import config
from ...group.engine import DEFAULT_GROUP_DESC, DEFAULT_GROUP_NAME, WorldParts
from ...group.process_group import ProcessGroup
from ...store.base import Store
from ...store.tcp_store import TCPStore
from . import engine, runtime
from .engine import mpi_group

log = logging.getLogger("accord")
_hook_lock = threading.Lock()
_hook_installed = False
_FORWARD_S = 0.5


def init_world(
    *,
    init_method: str | None,
    timeout: float,
    world_size: int,
    rank: int,
    store: Store | None,
    kind: type[ProcessGroup] = ProcessGroup,
) -> WorldParts:
    """The parts of this MPI rank's world (``init_method`` is not needed: MPI knows the ranks);
    ``kind``: the class of its default group (the API's, with torch's method-level API)."""
    mpi = runtime.load()
    size, me = mpi.COMM_WORLD.Get_size(), mpi.COMM_WORLD.Get_rank()
    _check_launch(size, me, world_size, rank)
    default = mpi_group(
        mpi.COMM_WORLD.Dup(), range(size), 0, timeout, DEFAULT_GROUP_NAME, DEFAULT_GROUP_DESC, kind
    )
    diagnostics, owns_store = (
        (store, False) if store is not None else (_diagnostics_store(size, me, timeout), True)
    )
    _install_abort_hook()
    return WorldParts(me, size, default, diagnostics, owns_store, "accord/mpi", _job_label(mpi))


def _check_launch(size: int, me: int, world_size: int, rank: int) -> None:
    wanted = world_size if world_size > 0 else config.env_int(config.WORLD_SIZE)
    if wanted is not None and wanted > 0 and wanted != size:
        program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "prog.py"
        if size == 1 and not runtime.launched_by_mpi():
            raise ValueError(
                f"backend 'mpi' was asked for a world of {wanted} ranks, but this process was not "
                f"started by an MPI launcher, so MPI sees one rank. Start the program with "
                f"mpiexec -n {wanted} python {program} (or your scheduler's srun), not with "
                f"accordrun/torchrun; MPI gives every rank its number"
            )
        raise ValueError(
            f"backend 'mpi': world_size={wanted} (or WORLD_SIZE) but MPI started "
            f"{size} ranks; pass no world_size (MPI's is used) or start "
            f"mpiexec -n {wanted}"
        )
    if rank >= 0 and rank != me:
        raise ValueError(
            f"backend 'mpi': rank={rank} but MPI gave this process rank {me}; pass no rank (MPI's is used)"
        )


def _diagnostics_store(size: int, me: int, timeout: float) -> Store | None:
    """A TCPStore hosted by rank 0 for the progress board (None for one rank, or if it cannot
    be made: the job runs, with timeouts that cannot say where the other ranks are)."""
    if size < 2 or config.progress_interval() <= 0:
        return None
    mpi = runtime.load()
    comm = mpi.COMM_WORLD
    local = comm.Split_type(mpi.COMM_TYPE_SHARED)
    one_host = comm.allreduce(local.Get_size(), op=mpi.MIN) == size
    local.Free()
    store: Store | None = None
    address: tuple[str, int] | None = None
    if me == 0:
        host = "127.0.0.1" if one_host else (config.MASTER_ADDR.raw() or _host_address())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # loopback, or the user's own secret/TLS
                store = TCPStore(host, 0, size, True, timedelta(seconds=timeout), wait_for_workers=False)
            address = (host, store.port)
        except Exception as exc:  # noqa: BLE001 — diagnostics must not stop the job
            log.warning(
                "accord (backend mpi): no diagnostics store (%s): a timeout will not say "
                "where the other ranks are",
                exc,
            )
    address = comm.bcast(address, root=0)
    if address is not None and me != 0:
        try:
            store = TCPStore(
                address[0], address[1], size, False, timedelta(seconds=timeout), wait_for_workers=False
            )
        except Exception as exc:  # noqa: BLE001
            log.warning(
                "accord (backend mpi): cannot reach rank 0's diagnostics store at %s:%d (%s)",
                address[0],
                address[1],
                exc,
            )
    comm.Barrier()  # every rank is connected before rank 0 may leave (and close the store)
    return store


def _host_address() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def _job_label(mpi: Any) -> str:
    label = config.run_id()
    if label:
        return label
    mine = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}" if mpi.COMM_WORLD.Get_rank() == 0 else None
    return str(mpi.COMM_WORLD.bcast(mine, root=0))


def _install_abort_hook() -> None:
    """An uncaught exception on a rank of an MPI world: print it, then end the whole MPI job
    (MPI_Abort) — MPI cannot tell the peers otherwise, and they would wait for this rank
    until their timeout."""
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        _hook_installed = True
        previous = sys.excepthook

        def accord_mpi_excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
            previous(exc_type, exc, tb)
            comm = runtime.load().COMM_WORLD
            if not engine.world_alive() or comm.Get_size() < 2:
                return  # (the MPI world was destroyed, or is one rank)
            sys.stderr.write(
                f"accord: rank {comm.Get_rank()} of the MPI job raised {exc_type.__name__} "
                f"(above); ending the job (MPI_Abort) so that the other "
                f"{comm.Get_size() - 1} ranks do not wait for it\n"
            )
            sys.stderr.flush()
            time.sleep(_FORWARD_S)  # the launcher forwards our output before it kills everyone
            runtime.load().COMM_WORLD.Abort(1)

        sys.excepthook = accord_mpi_excepthook
