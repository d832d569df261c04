"""torch's TCPStore wire protocol: commands, limits, and the codec of both sides (sans-IO).

Owns: the byte layout of every request and reply of torch 2.13's TCPStore (see
docs/wire-protocols.md), the limits a server enforces, an incremental decoder of the request
stream (``RequestDecoder``, for the server) and the encoders of requests and replies. Must not
know sockets, threads, clocks or what a command does to the store: the server and the client
move the bytes and act on what this module returns.

Layout: little-endian. A request is one command byte, then its arguments; a string (key or
value) is a u64 length and the bytes. Replies have no header: their shape follows from the
command (a u8 code, an i64, a u32, a string, or a list of strings). SET, APPEND, MULTI_SET,
QUEUE_PUSH and VALIDATE have no reply. A connection starts with VALIDATE (torch's magic
number) and, from torch's clients, PING. Anything else — a command this side does not know,
a wrong magic, a command before VALIDATE, a string above the limits — ends the stream: the
decoder returns the requests before it and holds a ProtocolError naming the cause.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..errors import ProtocolError, StoreLimitError


class Command(enum.IntEnum):
    """The command byte of a request (torch's ``QueryType``)."""

    VALIDATE = 0
    SET = 1
    COMPARE_SET = 2
    GET = 3
    ADD = 4
    CHECK = 5
    WAIT = 6
    GETNUMKEYS = 7
    DELETE_KEY = 8
    APPEND = 9
    MULTI_GET = 10
    MULTI_SET = 11
    CANCEL_WAIT = 12
    PING = 13
    QUEUE_PUSH = 14
    QUEUE_POP = 15
    QUEUE_LEN = 16
    LIST_KEYS = 17
    BARRIER = 18


#: The u32 a client sends with VALIDATE (torch's ``validationMagicNumber``).
MAGIC = 0x3C85F7CE
#: CHECK replies (u8).
READY, NOT_READY = 0, 1
#: WAIT / BARRIER / CANCEL_WAIT replies (u8).
STOP_WAITING, WAIT_CANCELED = 0, 1

#: Limits, as torch's libuv server: a key (a client's "/" prefix included), a value, and the
#: number of keys in one CHECK, WAIT, MULTI_GET or MULTI_SET.
MAX_KEY_BYTES = 8 * 1024
MAX_VALUE_BYTES = 8 * 1024 * 1024
MAX_KEY_COUNT = 128 * 1024

_U8, _U32 = struct.Struct("<B"), struct.Struct("<I")
_U64, _I64 = struct.Struct("<Q"), struct.Struct("<q")

#: Each command's arguments, in order: "key" / "value" (u64 length + bytes), "i64", "u32",
#: "keys" (u64 count + keys), "pairs" (i64 count + key, value pairs).
ARGUMENTS: dict[Command, tuple[str, ...]] = {
    Command.VALIDATE: ("u32",),
    Command.PING: ("u32",),
    Command.SET: ("key", "value"),
    Command.COMPARE_SET: ("key", "value", "value"),
    Command.GET: ("key",),
    Command.ADD: ("key", "i64"),
    Command.CHECK: ("keys",),
    Command.WAIT: ("keys",),
    Command.GETNUMKEYS: (),
    Command.DELETE_KEY: ("key",),
    Command.APPEND: ("key", "value"),
    Command.MULTI_GET: ("keys",),
    Command.MULTI_SET: ("pairs",),
    Command.CANCEL_WAIT: (),
    Command.QUEUE_PUSH: ("key", "value"),
    Command.QUEUE_POP: ("key",),
    Command.QUEUE_LEN: ("key",),
    Command.LIST_KEYS: (),
    Command.BARRIER: ("key", "i64"),
}


class Request(NamedTuple):
    """One decoded request: ``keys`` and ``values`` in the order sent; ``number`` is the
    VALIDATE magic, the PING nonce, ADD's amount or BARRIER's world size."""

    command: Command
    keys: tuple[str, ...] = ()
    values: tuple[bytes, ...] = ()
    number: int = 0


# -- keys ---------------------------------------------------------------------------------------
def key_bytes(key: str) -> bytes:
    """A key as sent: UTF-8, and any byte a torch client sent comes back unchanged."""
    return key.encode("utf-8", "surrogateescape")


def key_text(raw: bytes) -> str:
    """A received key as a str (bytes that are not UTF-8 survive as surrogates)."""
    return str(raw, "utf-8", "surrogateescape")


def check_limits(keys: list[bytes], values: list[bytes], what: str) -> None:
    """StoreLimitError (a DistStoreError and a ValueError) naming the limit when a request would
    break it (a client checks before sending: the server would close the connection)."""
    if len(keys) > MAX_KEY_COUNT:
        raise StoreLimitError(
            f"{what}: {len(keys)} keys in one call, above the TCPStore limit of "
            f"{MAX_KEY_COUNT}; split the call"
        )
    for key in keys:
        if len(key) > MAX_KEY_BYTES:
            raise StoreLimitError(
                f"{what}: a key of {len(key)} bytes is above the TCPStore limit of "
                f"{MAX_KEY_BYTES} (torch's server has the same); use a shorter key"
            )
    for value in values:
        if len(value) > MAX_VALUE_BYTES:
            raise StoreLimitError(
                f"{what}: a value of {len(value)} bytes is above the TCPStore limit of "
                f"{MAX_VALUE_BYTES} (8 MiB, torch's server has the same); store large data "
                f"elsewhere and put a reference in the store"
            )


# -- encoding -----------------------------------------------------------------------------------
def string(data: bytes) -> bytes:
    """A key or value as sent: u64 length, then the bytes."""
    return _U64.pack(len(data)) + data


def request(
    command: Command,
    *,
    keys: Sequence[bytes] = (),
    values: Sequence[bytes] = (),
    number: int = 0,
) -> bytes:
    """The bytes of one request (arguments as ``ARGUMENTS`` lists them)."""
    out = [_U8.pack(command)]
    key_iter, value_iter = iter(keys), iter(values)
    for kind in ARGUMENTS[command]:
        if kind == "key":
            out.append(string(next(key_iter)))
        elif kind == "value":
            out.append(string(next(value_iter)))
        elif kind == "i64":
            out.append(_I64.pack(number))
        elif kind == "u32":
            out.append(_U32.pack(number))
        elif kind == "keys":
            out.append(_U64.pack(len(keys)))
            out.extend(string(k) for k in keys)
        else:  # "pairs"
            out.append(_I64.pack(len(keys)))
            for key, value in zip(keys, values):
                out += (string(key), string(value))
    return b"".join(out)


def reply_u8(code: int) -> bytes:
    return _U8.pack(code)


def reply_u32(value: int) -> bytes:
    return _U32.pack(value)


def reply_i64(value: int) -> bytes:
    return _I64.pack(value)


def reply_strings(items: list[bytes]) -> bytes:
    """Values one after another (MULTI_GET), each a u64 length and the bytes."""
    return b"".join(string(item) for item in items)


def reply_key_list(keys: list[str]) -> bytes:
    """LIST_KEYS: an i64 count, then the keys."""
    return _I64.pack(len(keys)) + b"".join(string(key_bytes(k)) for k in keys)


def reply_popped(value: bytes | None, length_before: int) -> bytes:
    """QUEUE_POP: the queue's length before the pop (i64), then the value if there was one."""
    return _I64.pack(length_before) + (string(value) if value is not None else b"")


# -- decoding replies (the client reads them with a ``read(n)`` that returns n bytes) ------------
def read_u8(read: Callable[[int], bytes]) -> int:
    return read(1)[0]


def read_u32(read: Callable[[int], bytes]) -> int:
    value: int = _U32.unpack(read(4))[0]
    return value


def read_i64(read: Callable[[int], bytes]) -> int:
    value: int = _I64.unpack(read(8))[0]
    return value


def read_string(read: Callable[[int], bytes], limit: int = 1 << 40) -> bytes:
    length: int = _U64.unpack(read(8))[0]
    if length > limit:
        raise ProtocolError(
            f"TCPStore: the server announced a string of {length} bytes, above "
            f"any limit; the stream is corrupt or the peer is not a TCPStore"
        )
    return read(length)


def read_popped(read) -> bytes | None:  # noqa: ANN001
    """QUEUE_POP's reply: the value, or None if the queue was empty."""
    return read_string(read) if read_i64(read) > 0 else None


def read_key_list(read) -> list[str]:  # noqa: ANN001
    """LIST_KEYS's reply."""
    return [key_text(read_string(read)) for _ in range(read_i64(read))]


# -- decoding requests (the server) ---------------------------------------------------------------
class _Short(Exception):
    """The buffer ends inside the current request; args[0]: the offset it must reach."""


class _Cursor:
    __slots__ = ("buf", "pos", "command")

    def __init__(self, buf: bytearray, pos: int) -> None:
        self.buf, self.pos, self.command = buf, pos, "request"

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise _Short(end)
        chunk = bytes(self.buf[self.pos : end])
        self.pos = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> int:
        end = self.pos + fmt.size
        if end > len(self.buf):
            raise _Short(end)
        value: int = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos = end
        return value

    def string(self, limit: int, what: str) -> bytes:
        length = self.unpack(_U64)
        if length > limit:
            raise ProtocolError(
                f"a {self.command} {what} of {length} bytes is above the limit of {limit} bytes"
            )
        return self.take(length)

    def count(self, fmt: struct.Struct) -> int:
        count = self.unpack(fmt)
        if not 0 <= count <= MAX_KEY_COUNT:
            raise ProtocolError(
                f"a {self.command} of {count} keys is above the limit of {MAX_KEY_COUNT} keys"
            )
        return count


def _parse(cursor: _Cursor, command: Command) -> Request:
    """The arguments of ``command`` at the cursor (raises _Short if they are not all here)."""
    keys: list[str] = []
    values: list[bytes] = []
    number = 0
    for kind in ARGUMENTS[command]:
        if kind == "key":
            keys.append(key_text(cursor.string(MAX_KEY_BYTES, "key")))
        elif kind == "value":
            values.append(cursor.string(MAX_VALUE_BYTES, "value"))
        elif kind == "i64":
            number = cursor.unpack(_I64)
        elif kind == "u32":
            number = cursor.unpack(_U32)
        elif kind == "keys":
            for _ in range(cursor.count(_U64)):
                keys.append(key_text(cursor.string(MAX_KEY_BYTES, "key")))
        else:  # "pairs"
            for _ in range(cursor.count(_I64)):
                keys.append(key_text(cursor.string(MAX_KEY_BYTES, "key")))
                values.append(cursor.string(MAX_VALUE_BYTES, "value"))
    return Request(command, tuple(keys), tuple(values), number)


class RequestDecoder:
    """Turns the bytes a server receives on one connection, in chunks of any size, into
    requests. The first must be VALIDATE with torch's magic, and only the first.

    ``feed`` returns the requests the chunk completes; at the first violation it returns
    those before it and sets ``failed`` (the ProtocolError), and raises it if fed again.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._need = 1  # bytes the buffer must hold before parsing is worth trying again
        self._validated = False
        self.failed: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete request."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Request]:
        if self.failed is not None:
            raise self.failed
        buffer = self._buffer
        buffer += data
        if len(buffer) < self._need:
            return []
        requests: list[Request] = []
        cursor = _Cursor(buffer, 0)
        start = 0
        try:
            while start < len(buffer):
                cursor.pos = start
                requests.append(self._one(cursor))
                start = cursor.pos
            self._need = 1
        except _Short as short:
            self._need = short.args[0] - start
        except ProtocolError as exc:
            self.failed = exc
        finally:
            del buffer[:start]
        return requests

    def _one(self, cursor: _Cursor) -> Request:
        code = cursor.unpack(_U8)
        try:
            command = Command(code)
        except ValueError:
            raise ProtocolError(self._unknown(code, cursor)) from None
        cursor.command = command.name
        if (command is Command.VALIDATE) == self._validated:
            raise ProtocolError(
                "VALIDATE a second time on one connection: not a torch TCPStore client"
                if self._validated
                else self._not_first(cursor)
            )
        parsed = _parse(cursor, command)
        if command is Command.VALIDATE:
            if parsed.number != MAGIC:
                raise ProtocolError(
                    f"VALIDATE carried the magic number 0x{parsed.number:08X}, not torch's "
                    f"0x{MAGIC:08X}: the client speaks another version of the protocol"
                )
            self._validated = True
        return parsed

    def _unknown(self, code: int, cursor: _Cursor) -> str:
        if not self._validated:
            return self._not_first(cursor)
        return (
            f"unknown command {code} (this server knows 0-{max(Command)}, torch 2.13's "
            f"commands): a client of a newer protocol, or a corrupt stream"
        )

    def _not_first(self, cursor: _Cursor) -> str:
        head = bytes(cursor.buf[:8])
        if head.startswith(b"AS"):
            return (
                "the client speaks accord's own store protocol of accord versions before "
                "torch's was adopted; run the same accord version everywhere"
            )
        return (
            f"the connection did not start with VALIDATE (it starts {head!r}): not a "
            f"TCPStore client, or one of an incompatible version"
        )
