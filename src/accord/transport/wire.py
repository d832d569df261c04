"""The transport's frame header: a fixed 56-byte little-endian struct, sans-IO.

Owns: the header layout, frame kinds, and encoding/decoding of headers. Must not know about
sockets, shared memory, groups or algorithms: the fields are numbers whose meaning belongs to
the layers above (``op``/``dtype``/``count``/``root`` are the collective's fingerprint, checked
by the receiver so that ranks that disagree get an error instead of wrong data).

Layout (``<2sBBIQIBBHqQiQ``)::

    magic  2s  b"AC"           kind  u8  FrameKind          version u8
    group  u32 group id        seq   u64 collective number  step    u32 message in the call
    op     u8  collective code dtype u8  element-type code  algo    u16 algorithm code
    tag    i64 p2p tag         count u64 fingerprint count  root    i32 fingerprint root (-1)
    nbytes u64 payload length, followed by exactly nbytes of payload
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from ..errors import ProtocolError

MAGIC = b"AC"
VERSION = 1
HEADER = struct.Struct("<2sBBIQIBBHqQiQ")
HEADER_SIZE = HEADER.size  # 56
#: Largest payload a peer may announce (1 TiB): anything bigger is a corrupt stream.
MAX_PAYLOAD = 1 << 40


class FrameKind(enum.IntEnum):
    HELLO = 1  # first frame on a TCP link: payload = the connector's identity
    COLL = 2  # a collective's message, matched by (group, seq, step) and source
    P2P = 3  # a point-to-point message, matched by (group, tag) and source, in order
    GOODBYE = 4  # orderly close: the peer left (destroy_process_group); not a failure
    POISON = 5  # the peer's group failed; payload = UTF-8 reason. Breaks that group here
    LEAVE = 6  # the peer destroyed one group; payload = u64: the last call it ended there


class Fingerprint(NamedTuple):
    """What every rank must agree on for one collective call."""

    op: int = 0
    algo: int = 0
    dtype: int = 0
    count: int = 0  # type: ignore[assignment]  # a field: shadows tuple.count, which nothing here calls
    root: int = -1


NO_FINGERPRINT = Fingerprint()
_KINDS = frozenset(int(k) for k in FrameKind)


class Header(NamedTuple):
    kind: int
    group: int
    seq: int = 0
    step: int = 0
    tag: int = 0
    fingerprint: Fingerprint = NO_FINGERPRINT
    nbytes: int = 0

    def pack(self) -> bytes:
        fp = self.fingerprint
        return HEADER.pack(
            MAGIC,
            self.kind,
            VERSION,
            self.group,
            self.seq,
            self.step,
            fp.op,
            fp.dtype,
            fp.algo,
            self.tag,
            fp.count,
            fp.root,
            self.nbytes,
        )


def pack_header(kind: int, group: int, seq: int, step: int, tag: int, fp: Fingerprint, nbytes: int) -> bytes:
    """Encode a header without building a Header object (the hot path)."""
    return HEADER.pack(
        MAGIC, kind, VERSION, group, seq, step, fp.op, fp.dtype, fp.algo, tag, fp.count, fp.root, nbytes
    )


def unpack_header(data: bytes | bytearray | memoryview, offset: int = 0) -> Header:
    """Decode and validate one header.

    Raises:
        ProtocolError: wrong magic or version, unknown kind, or an absurd payload length.
    """
    (magic, kind, version, group, seq, step, op, dtype, algo, tag, count, root, nbytes) = HEADER.unpack_from(
        data, offset
    )
    if magic != MAGIC:
        raise ProtocolError(f"bad frame magic {bytes(magic)!r}: the peer is not an accord transport")
    if version != VERSION:
        raise ProtocolError(f"peer speaks transport version {version}, this process speaks {VERSION}")
    if kind not in _KINDS:
        raise ProtocolError(f"unknown frame kind {kind}")
    if nbytes > MAX_PAYLOAD:
        raise ProtocolError(f"frame announces {nbytes} bytes of payload: a corrupt stream")
    return Header(kind, group, seq, step, tag, Fingerprint(op, algo, dtype, count, root), nbytes)
