"""What the MPI backend needs from MPI itself: loading mpi4py, MPI datatypes and ops for
accord's buffers and ReduceOps, and waiting on MPI requests within a deadline.

Owns: the clear error when mpi4py is missing, how a NumPy array and an accord ``Kernel`` map
onto an MPI datatype and op (an op MPI lacks, or a dtype it cannot reduce — float16,
bfloat16, bool, and Open MPI's sums of 8- and 16-bit integers, which saturate — becomes a
user-defined MPI op that runs accord's own kernel), and
``wait_until``, the polling loop every MPI wait goes through: MPI makes progress only inside
its calls, so it keeps testing, yields the core when ranks outnumber cores, and gives up at
the deadline instead of blocking forever. Must not know about groups or the API.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import DistTimeoutError
from ...reduce_ops import Kernel, RedOpType
from ...timeouts import Deadline, format_seconds

_mpi: Any = None
_lock = threading.Lock()

INSTALL_HINT = (
    'pip install "accord[mpi]" (mpi4py and MPICH from PyPI), or pip install mpi4py '
    "built against your cluster's MPI"
)


def load() -> Any:
    """The ``mpi4py.MPI`` module (importing it starts MPI, with MPI_THREAD_MULTIPLE)."""
    global _mpi
    if _mpi is None:
        with _lock:
            if _mpi is None:
                try:
                    from mpi4py import MPI
                except ImportError as exc:
                    raise ValueError(
                        f"backend 'mpi' needs mpi4py, which cannot be imported ({exc}): {INSTALL_HINT}"
                    ) from exc
                _mpi = MPI
    return _mpi


#: Environment variables an MPI launcher (mpiexec of MPICH or Open MPI, srun) sets.
LAUNCHER_VARIABLES = (
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "HYDI_CONTROL_FD",
    "PMI_FD",
)


def launched_by_mpi() -> bool:
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


# -- datatypes and ops ------------------------------------------------------------------------
_MPI_OP_NAMES = {
    RedOpType.SUM: "SUM",
    RedOpType.AVG: "SUM",
    RedOpType.PREMUL_SUM: "SUM",
    RedOpType.PRODUCT: "PROD",
    RedOpType.MIN: "MIN",
    RedOpType.MAX: "MAX",
    RedOpType.BAND: "BAND",
    RedOpType.BOR: "BOR",
    RedOpType.BXOR: "BXOR",
}
_COMPLEX_OPS = {RedOpType.SUM, RedOpType.AVG, RedOpType.PREMUL_SUM, RedOpType.PRODUCT}
_user_ops: dict[tuple[Any, ...], Any] = {}
_typed: dict[int, Any] = {}


_TYPE_NAMES = {
    "i1": "INT8_T",
    "i2": "INT16_T",
    "i4": "INT32_T",
    "i8": "INT64_T",
    "u1": "UINT8_T",
    "u2": "UINT16_T",
    "u4": "UINT32_T",
    "u8": "UINT64_T",
    "f4": "FLOAT",
    "f8": "DOUBLE",
    "c8": "C_FLOAT_COMPLEX",
    "c16": "C_DOUBLE_COMPLEX",
}


def _type_of(dtype: np.dtype) -> Any:
    """MPI's predefined type of a NumPy dtype (a derived duplicate would not reduce)."""
    return getattr(load(), _TYPE_NAMES[dtype.str[1:]])


def element_type(itemsize: int) -> Any:
    """An MPI datatype of ``itemsize`` opaque bytes (a user op's elements: MPI cuts large
    messages on element boundaries)."""
    found = _typed.get(itemsize)
    if found is None:
        mpi = load()
        plain = {1: mpi.UINT8_T, 2: mpi.UINT16_T, 4: mpi.UINT32_T, 8: mpi.UINT64_T}.get(itemsize)
        found = plain if plain is not None else mpi.BYTE.Create_contiguous(itemsize).Commit()
        _typed[itemsize] = found
    return found


_SMALL_INTEGERS = ("i1", "i2", "u1", "u2")
_saturating: list[bool] = []  # [whether this MPI's SUM saturates 8- and 16-bit integers]


def sums_saturate() -> bool:
    """Whether this MPI's SUM of 8- and 16-bit integers may saturate instead of wrapping
    around (as NumPy and torch do): Open MPI's AVX reduction (``op/avx``, on CPUs with
    AVX2/AVX-512, 16 or more elements) clips them, open-mpi/ompi#8045."""
    if not _saturating:
        mpi = load()
        try:
            vendor = mpi.get_vendor()[0]
            version = mpi.Get_library_version()
        except Exception:  # noqa: BLE001 — an MPI that does not say: keep MPI's own SUM
            vendor = version = ""
        _saturating.append(vendor == "Open MPI" or version.lstrip().startswith("Open MPI"))
    return _saturating[0]


def reduction(flat: np.ndarray, kernel: Kernel) -> tuple[Any, Any]:
    """(MPI datatype, MPI op) that reduce ``flat`` as ``kernel`` does (before its finalize)."""
    mpi = load()
    kind = kernel.op.op
    code = flat.dtype.str[1:]
    native = code in _TYPE_NAMES and not kernel.bfloat16
    if code in ("c8", "c16") and kind not in _COMPLEX_OPS:
        native = False
    if code in _SMALL_INTEGERS and _MPI_OP_NAMES[kind] == "SUM" and sums_saturate():
        native = False  # accord's kernel wraps around
    if code.startswith(("f", "c")) and kind in (RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR):
        native = False
    if native:
        return _type_of(flat.dtype), getattr(mpi, _MPI_OP_NAMES[kind])
    return element_type(flat.itemsize), user_op(kernel, flat.dtype)


def user_op(kernel: Kernel, dtype: np.dtype) -> Any:
    """An MPI op that folds with accord's ``kernel`` (every accord op is commutative)."""
    key = (kernel.op.op, kernel.op.factor, dtype.str, kernel.bfloat16)
    found = _user_ops.get(key)
    if found is None:
        combine = kernel.combine

        def fold(incoming: Any, inout: Any, datatype: Any) -> None:
            acc = np.frombuffer(inout, dtype=dtype)
            combine(acc, np.frombuffer(incoming, dtype=dtype))

        found = _user_ops[key] = load().Op.Create(fold, commute=True)
    return found


def as_bytes(array: np.ndarray) -> list[Any]:
    """An MPI message of ``array``'s bytes."""
    return [array.view(np.uint8) if array.size else np.empty(0, np.uint8), load().BYTE]


# -- waiting ------------------------------------------------------------------------------------
_SPINS = 64  # tests before the first yield
_SLEEP_AFTER = 1.0  # seconds of waiting before short sleeps (a slow or stuck peer)
_SLEEP = 0.0005


def wait_until(done: Callable[[], bool], deadline: Deadline) -> bool:
    """Call ``done()`` (which tests MPI requests, and so drives MPI's progress) until it is
    true (True) or the deadline passes (False)."""
    for _ in range(_SPINS):
        if done():
            return True
    started = time.monotonic()
    expires = deadline.expires_at
    yield_ = os.sched_yield
    while True:
        if done():
            return True
        now = time.monotonic()
        if now >= expires:
            return done()
        if now - started > _SLEEP_AFTER:
            time.sleep(_SLEEP)
        else:
            yield_()


def timed_out(context: str, deadline: Deadline, what: str) -> DistTimeoutError:
    return DistTimeoutError(
        f"{context}: {what} did not complete in {format_seconds(deadline.budget)}. "
        f"Are all ranks alive, and did every rank call the same collectives "
        f"in the same order?"
    )
