"""Every exception accord raises on purpose, sorted by whose fault it is.

Owns: the exception hierarchy and nothing else. Must not know anything above it.

torch.distributed's own names (``DistError``, ``DistBackendError``, ``DistNetworkError``,
``DistStoreError``, ``QueueEmptyError``) are kept with torch's base classes, so code written
as ``except RuntimeError`` or ``except dist.DistStoreError`` keeps working. accord's own
classes subclass the nearest built-in as well:

| class | whose fault | also a |
|---|---|---|
| ArgumentError | the caller: fix the call | ValueError, RuntimeError |
| ArgumentTypeError | the caller: wrong kind of argument | TypeError, ValueError, RuntimeError |
| ShortListError | the caller: a list too short | IndexError, ValueError, RuntimeError |
| DestroyedGroupError | the caller: a group used after its destroy_process_group | ValueError, RuntimeError |
| NotInitializedError | the caller: init_process_group first | ValueError (as torch raises) |
| DistTimeoutError | the world: a peer or store too slow | TimeoutError |
| PeerError | the world: a peer died or went away | ConnectionError |
| CollectiveMismatchError | the program: ranks disagree | RuntimeError |
| DistStoreError | the store (one type for every store) | RuntimeError |
| AuthenticationError | the setup: a peer without the secret | ConnectionError |
| InternalError | accord itself: please report it | RuntimeError |

Argument errors belong to several built-in classes on purpose. For one kind of mistake torch
raises a ValueError from its Python checks, a RuntimeError from its C++ checks (a bitwise op
on floats, a list of the wrong length for gloo), a TypeError from its bindings, an IndexError
where it writes past the end of a list: code written for torch catches whichever torch
raises. accord raises its own, clearer message as an ``ArgumentError`` (a ValueError and a
RuntimeError), an ``ArgumentTypeError`` (also a TypeError) or a ``ShortListError`` (also an
IndexError), so that the ``except`` clause written for torch catches it too
(tests/differential/test_error_survey.py checks this case by case against torch). They are
not DistErrors: nothing failed in the distributed system.

Messages answer what, where, why and what next, e.g. "all_reduce #12 on rank 2: nothing from
rank 3 in 30 s. Is rank 3 alive, and did every rank call the same collectives in the same
order?"
"""

from __future__ import annotations

import traceback


class ArgumentError(ValueError, RuntimeError):
    """An argument of a call is wrong: the caller's fault, found before any byte moved.

    A ValueError (accord's rule for a wrong value) and a RuntimeError (what torch's C++
    checks raise for most of the same mistakes), so that either ``except`` catches it.
    """


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong kind (not a tensor, an op its dtype does not support …).

    Also a TypeError, which torch's bindings raise for the wrong kind of argument, while
    its checks raise ValueError or RuntimeError for others (a bitwise op on floats is a
    RuntimeError, MAX on complex a ValueError): this class is all three.
    """


class ShortListError(ArgumentError, IndexError):
    """A list argument shorter than the call needs (one slot per rank, at least one op).

    Also an IndexError: torch writes past the end of such a list (all_gather_object,
    gather_object) or reads its first element (batch_isend_irecv) and raises IndexError.
    """


class DestroyedGroupError(ArgumentError):
    """A call on a group that this rank destroyed (``destroy_process_group(group)``). torch's
    gloo happens to run it; accord refuses before anything is sent, since the other members
    may have destroyed it too, or may be waiting in it for a call this rank will not make."""


class DistError(RuntimeError):
    """Base class of every error accord raises deliberately (torch's name)."""


class DistBackendError(DistError):
    """A collective or point-to-point operation failed (torch's name)."""


class DistNetworkError(DistError, ConnectionError):
    """A network operation failed: connecting, reading or writing a socket (torch's name)."""


class AuthenticationError(DistNetworkError):
    """A connection did not prove it holds the job's secret (ACCORD_SECRET): it has none,
    another one, or the peer asked for none while this side has one. The connection is
    refused; the job goes on. Also raised for a secret file others could read."""


class DistStoreError(DistError):
    """A key-value store operation failed, including store timeouts (torch's name).

    Every accord store raises this one type; torch's FileStore raises a plain RuntimeError
    instead, accord's does not.
    """


class StoreLimitError(DistStoreError, ValueError):
    """A store request above the server's limits (key or value size, keys per call), refused
    by the client before it is sent."""


class QueueEmptyError(DistStoreError):
    """``queue_pop(key, block=False)`` found the queue empty (torch's name)."""


class DistTimeoutError(DistBackendError, TimeoutError):
    """A deadline passed before the peers answered.

    When raised by a collective, the group that saw it is broken from then on.
    """


class StoreTimeoutError(DistStoreError, TimeoutError):
    """A store operation (get, wait, queue_pop …) waited longer than its timeout."""


class PeerError(DistBackendError, ConnectionError):
    """A peer died, closed its end, left the group, or reported a failure of its own.

    The group that saw it is unusable from then on: later calls raise at once.
    """

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class ProtocolError(PeerError):
    """Bytes from a peer break the framing rules: not an accord peer, or a corrupt stream."""


class CollectiveMismatchError(DistBackendError):
    """Ranks disagree on the collective they run: its kind, order, dtype, size or root."""


class NotInitializedError(DistError, ValueError):
    """The functional API was used before ``init_process_group()``."""


class DestroyedBeforeInitError(NotInitializedError, AssertionError):
    """``destroy_process_group()`` with nothing to destroy (torch raises AssertionError)."""


class InternalError(DistError):
    """An internal invariant broke. Never raised for a user's mistake: please report it."""


def clear_frames_below(error: BaseException) -> None:
    """Clear the locals of the finished frames under the one that caught ``error`` (a
    collective's views of shared memory, its words): an error the caller keeps must not keep
    a destroyed group's segments mapped. The traceback still shows where it happened."""
    tb = error.__traceback__
    if tb is not None and tb.tb_next is not None:
        traceback.clear_frames(tb.tb_next)


def with_context(error: BaseException, context: object) -> BaseException:
    """A copy of ``error`` whose message starts with ``context`` (e.g. 'all_reduce #12 on
    rank 2'), of the same class, chained to the original. Returned unchanged if it already
    starts so, or if its class cannot be rebuilt from a message."""
    text = str(error)
    prefix = str(context)
    if text.startswith(prefix):
        return error
    try:
        copy = type(error)(f"{prefix}: {text}")
    except TypeError:
        return error
    if isinstance(error, PeerError) and isinstance(copy, PeerError):
        copy.peer = error.peer
    copy.__cause__ = error
    return copy


__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "CollectiveMismatchError",
    "DistBackendError",
    "DistError",
    "DistNetworkError",
    "DistStoreError",
    "DistTimeoutError",
    "InternalError",
    "NotInitializedError",
    "PeerError",
    "ProtocolError",
    "QueueEmptyError",
    "ShortListError",
    "StoreTimeoutError",
    "with_context",
]
