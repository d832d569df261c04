"""The TCPStore wire codec: messages, their encoding, and an incremental decoder (sans-IO).

Owns: the byte layout of every TCPStore request and response (see docs/wire-protocols.md)
and the rules a stream must follow. Must not know sockets, threads, clocks or the store's
semantics: the server and the client feed it bytes and act on the messages it returns.

Frame: an 8-byte header ``!2sBBI`` — magic ``b"AS"``, protocol version, opcode, body length
— then the body: the message's fields in order. Field encodings (network byte order):
``str``/``bytes`` = u32 length + bytes (str as UTF-8); ``i64``; ``f64`` (a timeout in
seconds, finite and >= 0); ``bool`` = u8 0/1; lists = u32 count + items. A connection starts
with a HELLO request; the decoder of requests insists on it. Any violation — wrong magic or
version, unknown opcode, a frame above the size limit, a body that does not parse exactly —
raises ProtocolError, after which the decoder refuses further input.

List fields are tuples in decoded messages; encoding accepts any sequence.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, fields
from typing import ClassVar, Union

from ..errors import ProtocolError

MAGIC = b"AS"
VERSION = 1
HEADER = struct.Struct("!2sBBI")
DEFAULT_MAX_FRAME_BYTES = 1 << 30

_U32, _I64 = struct.Struct("!I"), struct.Struct("!q")
_F64, _U8 = struct.Struct("!d"), struct.Struct("!B")

#: ErrorResponse codes.
ERR_STORE, ERR_QUEUE_EMPTY, ERR_INTERNAL = 1, 2, 3


# -- requests (client → server) ----------------------------------------------------------------
@dataclass(frozen=True)
class Hello:
    """First message of a connection. ``is_worker``: counts towards wait_for_workers."""
    version: int
    is_worker: bool
    OP: ClassVar[int] = 0x01
    KINDS: ClassVar[tuple[str, ...]] = ("i64", "bool")


@dataclass(frozen=True)
class SetRequest:
    key: str
    value: bytes
    OP: ClassVar[int] = 0x02
    KINDS: ClassVar[tuple[str, ...]] = ("str", "bytes")


@dataclass(frozen=True)
class GetRequest:
    key: str
    timeout: float
    OP: ClassVar[int] = 0x03
    KINDS: ClassVar[tuple[str, ...]] = ("str", "f64")


@dataclass(frozen=True)
class AddRequest:
    key: str
    amount: int
    OP: ClassVar[int] = 0x04
    KINDS: ClassVar[tuple[str, ...]] = ("str", "i64")


@dataclass(frozen=True)
class CompareSetRequest:
    key: str
    expected: bytes
    desired: bytes
    OP: ClassVar[int] = 0x05
    KINDS: ClassVar[tuple[str, ...]] = ("str", "bytes", "bytes")


@dataclass(frozen=True)
class WaitRequest:
    keys: tuple[str, ...]
    timeout: float
    OP: ClassVar[int] = 0x06
    KINDS: ClassVar[tuple[str, ...]] = ("strs", "f64")


@dataclass(frozen=True)
class CheckRequest:
    keys: tuple[str, ...]
    OP: ClassVar[int] = 0x07
    KINDS: ClassVar[tuple[str, ...]] = ("strs",)


@dataclass(frozen=True)
class DeleteKeyRequest:
    key: str
    OP: ClassVar[int] = 0x08
    KINDS: ClassVar[tuple[str, ...]] = ("str",)


@dataclass(frozen=True)
class NumKeysRequest:
    OP: ClassVar[int] = 0x09
    KINDS: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class AppendRequest:
    key: str
    value: bytes
    OP: ClassVar[int] = 0x0A
    KINDS: ClassVar[tuple[str, ...]] = ("str", "bytes")


@dataclass(frozen=True)
class MultiGetRequest:
    keys: tuple[str, ...]
    timeout: float
    OP: ClassVar[int] = 0x0B
    KINDS: ClassVar[tuple[str, ...]] = ("strs", "f64")


@dataclass(frozen=True)
class MultiSetRequest:
    keys: tuple[str, ...]
    values: tuple[bytes, ...]
    OP: ClassVar[int] = 0x0C
    KINDS: ClassVar[tuple[str, ...]] = ("strs", "bytess")


@dataclass(frozen=True)
class QueuePushRequest:
    key: str
    value: bytes
    OP: ClassVar[int] = 0x0D
    KINDS: ClassVar[tuple[str, ...]] = ("str", "bytes")


@dataclass(frozen=True)
class QueuePopRequest:
    key: str
    block: bool
    timeout: float
    OP: ClassVar[int] = 0x0E
    KINDS: ClassVar[tuple[str, ...]] = ("str", "bool", "f64")


@dataclass(frozen=True)
class QueueLenRequest:
    key: str
    OP: ClassVar[int] = 0x0F
    KINDS: ClassVar[tuple[str, ...]] = ("str",)


@dataclass(frozen=True)
class ListKeysRequest:
    OP: ClassVar[int] = 0x10
    KINDS: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class WaitWorkersRequest:
    """Park until ``count`` workers have said HELLO; answered with IntResponse(joined)."""
    count: int
    timeout: float
    OP: ClassVar[int] = 0x11
    KINDS: ClassVar[tuple[str, ...]] = ("i64", "f64")


# -- responses (server → client) ---------------------------------------------------------------
@dataclass(frozen=True)
class OkResponse:
    OP: ClassVar[int] = 0x81
    KINDS: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class ValueResponse:
    value: bytes
    OP: ClassVar[int] = 0x82
    KINDS: ClassVar[tuple[str, ...]] = ("bytes",)


@dataclass(frozen=True)
class IntResponse:
    value: int
    OP: ClassVar[int] = 0x83
    KINDS: ClassVar[tuple[str, ...]] = ("i64",)


@dataclass(frozen=True)
class BoolResponse:
    value: bool
    OP: ClassVar[int] = 0x84
    KINDS: ClassVar[tuple[str, ...]] = ("bool",)


@dataclass(frozen=True)
class ValuesResponse:
    values: tuple[bytes, ...]
    OP: ClassVar[int] = 0x85
    KINDS: ClassVar[tuple[str, ...]] = ("bytess",)


@dataclass(frozen=True)
class KeysResponse:
    keys: tuple[str, ...]
    OP: ClassVar[int] = 0x86
    KINDS: ClassVar[tuple[str, ...]] = ("strs",)


@dataclass(frozen=True)
class TimeoutResponse:
    """A parked request's timeout passed; ``keys`` are the keys (or the queue) still missing."""
    keys: tuple[str, ...]
    OP: ClassVar[int] = 0x87
    KINDS: ClassVar[tuple[str, ...]] = ("strs",)


@dataclass(frozen=True)
class ErrorResponse:
    """The operation failed: ``code`` is ERR_STORE, ERR_QUEUE_EMPTY or ERR_INTERNAL."""
    code: int
    message: str
    OP: ClassVar[int] = 0x88
    KINDS: ClassVar[tuple[str, ...]] = ("i64", "str")


Request = Union[Hello, SetRequest, GetRequest, AddRequest, CompareSetRequest, WaitRequest,
                CheckRequest, DeleteKeyRequest, NumKeysRequest, AppendRequest, MultiGetRequest,
                MultiSetRequest, QueuePushRequest, QueuePopRequest, QueueLenRequest,
                ListKeysRequest, WaitWorkersRequest]
Response = Union[OkResponse, ValueResponse, IntResponse, BoolResponse, ValuesResponse,
                 KeysResponse, TimeoutResponse, ErrorResponse]

#: Opcode → message class, per direction.
REQUESTS: dict[int, type] = {cls.OP: cls for cls in Request.__args__}  # type: ignore
RESPONSES: dict[int, type] = {cls.OP: cls for cls in Response.__args__}  # type: ignore


# -- encoding ----------------------------------------------------------------------------------
def _pack_field(kind: str, value: object, out: list[bytes]) -> None:
    if kind in ("str", "bytes"):
        raw = value.encode("utf-8") if kind == "str" else bytes(value)  # type: ignore[union-attr]
        out += (_U32.pack(len(raw)), raw)
    elif kind == "i64":
        out.append(_I64.pack(value))
    elif kind == "f64":
        out.append(_F64.pack(value))
    elif kind == "bool":
        out.append(_U8.pack(1 if value else 0))
    else:  # "strs" / "bytess": a counted list
        items = list(value)  # type: ignore[call-overload]
        out.append(_U32.pack(len(items)))
        for item in items:
            _pack_field(kind[:-1], item, out)


def _encode(message: object, table: dict[int, type], max_frame_bytes: int) -> bytes:
    cls = type(message)
    if table.get(getattr(cls, "OP", None)) is not cls:  # type: ignore[arg-type]
        raise TypeError(f"cannot encode {cls.__name__} here: not a TCPStore message "
                        f"of this direction")
    parts: list[bytes] = [b""]
    try:
        for field, kind in zip(fields(message), cls.KINDS):  # type: ignore[arg-type]
            _pack_field(kind, getattr(message, field.name), parts)
    except struct.error as exc:
        raise ValueError(
            f"cannot encode {cls.__name__}: {exc} (integers must fit in 64 bits)") from None
    length = sum(len(p) for p in parts)
    if length > max_frame_bytes:
        raise ValueError(
            f"{cls.__name__} needs {length} bytes, above the TCPStore frame limit of "
            f"{max_frame_bytes}; store large data elsewhere and put a reference in the store")
    parts[0] = HEADER.pack(MAGIC, VERSION, cls.OP, length)
    return b"".join(parts)


def encode_request(request: Request, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """One request as a complete frame."""
    return _encode(request, REQUESTS, max_frame_bytes)


def encode_response(response: Response, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """One response as a complete frame."""
    return _encode(response, RESPONSES, max_frame_bytes)


# -- decoding ----------------------------------------------------------------------------------
class _Reader:
    """Reads the fields of one frame body; every shortfall is a ProtocolError."""

    def __init__(self, body: memoryview, name: str) -> None:
        self.body, self.pos, self.name = body, 0, name

    def take(self, n: int) -> memoryview:
        if n > len(self.body) - self.pos:
            raise ProtocolError(f"TCPStore: a {self.name} frame ends in the middle of a field")
        chunk = self.body[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def field(self, kind: str) -> object:
        if kind == "bytes":
            return bytes(self.take(_U32.unpack(self.take(4))[0]))
        if kind == "str":
            try:
                return str(self.take(_U32.unpack(self.take(4))[0]), "utf-8")
            except UnicodeDecodeError:
                raise ProtocolError(
                    f"TCPStore: a {self.name} frame holds a key that is not UTF-8") from None
        if kind == "i64":
            return _I64.unpack(self.take(8))[0]
        if kind == "bool":
            flag = self.take(1)[0]
            if flag > 1:
                raise ProtocolError(f"TCPStore: a {self.name} frame holds the boolean {flag}")
            return bool(flag)
        if kind == "f64":
            seconds = _F64.unpack(self.take(8))[0]
            if not (math.isfinite(seconds) and seconds >= 0):
                raise ProtocolError(f"TCPStore: a {self.name} frame holds the timeout {seconds}")
            return seconds
        count = _U32.unpack(self.take(4))[0]
        if count * 4 > len(self.body) - self.pos:
            raise ProtocolError(
                f"TCPStore: a {self.name} frame announces {count} items it cannot hold")
        return tuple(self.field(kind[:-1]) for _ in range(count))


def decode_body(cls: type, body: memoryview) -> object:
    """The message of type ``cls`` whose fields are ``body``, exactly."""
    reader = _Reader(body, cls.__name__)
    values = [reader.field(kind) for kind in cls.KINDS]  # type: ignore[attr-defined]
    if reader.pos != len(body):
        stray = len(body) - reader.pos
        raise ProtocolError(f"TCPStore: a {cls.__name__} frame has {stray} stray bytes")
    return cls(*values)


class FrameDecoder:
    """Turns a byte stream, fed in chunks of any size, into messages.

    ``requests=True`` decodes what a server receives (and wants HELLO first); False decodes
    responses. ``feed`` returns the messages completed by the chunk; the first violation
    raises ProtocolError and poisons the decoder.
    """

    def __init__(self, requests: bool, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._table = REQUESTS if requests else RESPONSES
        self._requests = requests
        self._hello_seen = False
        self._max = max_frame_bytes
        self._buffer = bytearray()
        self._failed: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[object]:
        if self._failed is not None:
            raise self._failed
        self._buffer += data
        try:
            return self._drain()
        except ProtocolError as exc:
            self._failed = exc
            raise

    def _drain(self) -> list[object]:
        messages: list[object] = []
        buffer = self._buffer
        while True:
            if not MAGIC.startswith(bytes(buffer[:len(MAGIC)])):
                raise ProtocolError(
                    f"TCPStore: a frame starts with {bytes(buffer[:8])!r}, not the magic "
                    f"{MAGIC!r}: the peer is not an accord TCPStore, or the stream is corrupt")
            if len(buffer) < HEADER.size:
                return messages
            cls, length = self._check_header(*HEADER.unpack_from(buffer))
            end = HEADER.size + length
            if len(buffer) < end:
                return messages
            message = decode_body(cls, memoryview(bytes(buffer[HEADER.size:end])))
            del buffer[:end]
            self._hello_seen = self._hello_seen or cls is Hello
            messages.append(message)

    def _check_header(self, magic: bytes, version: int, op: int, length: int) -> tuple[type, int]:
        if version != VERSION:
            raise ProtocolError(f"TCPStore: the peer speaks protocol version {version}, this side "
                                f"{VERSION}; run the same accord version everywhere")
        cls = self._table.get(op)
        if cls is None:
            raise ProtocolError(f"TCPStore: unknown opcode 0x{op:02x} in a frame")
        if length > self._max:
            raise ProtocolError(f"TCPStore: a {cls.__name__} frame of {length} bytes is above the "
                                f"limit of {self._max}")
        if self._requests and (cls is Hello) == self._hello_seen:
            raise ProtocolError("TCPStore: a connection must start with exactly one HELLO, got "
                                f"{cls.__name__} {'again' if self._hello_seen else 'first'}")
        return cls, length
