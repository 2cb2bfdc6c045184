"""Data-plane frame codec (sans-IO, in the style of h11): pure functions over bytes.

Wire format, all little-endian::

    prefix  20 bytes  magic b"CV" | version u8 | op u8 | request id u32 | header length u32 | payload length u64
    header  N bytes   curvine.v1.DataHeader (protobuf), N <= MAX_HEADER
    payload M bytes   raw object/block bytes, M <= the receiver's payload limit

A response carries the request's op with RESPONSE_BIT set and the same request id. Transports read
the prefix and header through this module, then move the payload themselves (`os.sendfile` out,
`recv_into` a preallocated buffer in) so bulk bytes are never copied by Python.

Error handling: bytes from a peer that do not form a valid frame raise `ProtocolError` (drop that
connection); misuse by this process raises `LocalProtocolError`.

Which DataHeader fields each op uses:
    HELLO         token -> worker_id, epoch
    PUT           key, length(=payload), checksum, user_meta, storage_class, ttl_ms, epoch  -> (status)
                  [digest_trailer: length = the object's bytes, the payload = them + their trailer]
    GET           key, epoch -> found, length, checksum, user_meta + payload
    EXISTS        keys, pin, epoch -> hit_count
    DELETE        key -> found
    WRITE_BLOCK   block_id, checksum, storage_class, ttl_ms + payload -> (status) [digest_trailer as PUT]
    READ_BLOCK    block_id, offset, length -> length, checksum(of the whole block) + payload
    DELETE_BLOCK  block_id -> found
    REPORT_BAD    key or block_id: the client saw a checksum mismatch, the worker drops its copy
    PING          -> (status)
    SCRUB         key or block_id -> found, length, checksum: the stored copy re-read and verified
                  (found=false: not here); EIO: it failed verification (dropped, reported bad)
    SCRUB_KV      key (cursor: a stored name, "" = start), length (byte budget), offset (rate, bytes/s)
                  -> key (next cursor), found (done), length (bytes verified), hit_count (objects),
                  keys (the corrupt objects' keys, each dropped)
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from curvine_py.core import layout
from curvine_py.core.errors import InvalidArgument, LocalProtocolError, ProtocolError, TooLarge
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

MAGIC = b"CV"
VERSION = 1
PREFIX = struct.Struct("<2sBBIIQ")
PREFIX_SIZE = PREFIX.size  # 20
# Headers are small (a key, a few ids, user metadata of a few hundred bytes); the cap keeps a
# garbage length field from making us allocate.
MAX_HEADER = 64 * 1024
RESPONSE_BIT = 0x80
MAX_REQUEST_ID = 2**32 - 1


class Op(enum.IntEnum):
    HELLO = 1
    PUT = 2
    GET = 3
    EXISTS = 4
    DELETE = 5
    WRITE_BLOCK = 6
    READ_BLOCK = 7
    DELETE_BLOCK = 8
    REPORT_BAD = 9
    PING = 10
    SCRUB = 11
    SCRUB_KV = 12


# Code -> Op for the decoder: a tuple index instead of the enum's call (a microsecond a frame) or a
# dict.get (a call the profile counts, bench/kv_profile.py).
_OPS: tuple[Op | None, ...] = tuple(next((op for op in Op if op == code), None) for code in range(RESPONSE_BIT))
# Ops whose *request* may carry a payload; any other request with a payload is garbage.
REQUEST_PAYLOAD_OPS = frozenset({Op.PUT, Op.WRITE_BLOCK})
# Ops whose *response* may carry a payload.
RESPONSE_PAYLOAD_OPS = frozenset({Op.GET, Op.READ_BLOCK})


# Digest trailer (DataHeader.digest_trailer): the chunk digests of the object bytes that precede
# it, one u64 little-endian per layout.CHUNK_SIZE piece, in order.
_DIGEST = struct.Struct("<Q")


def trailer_size(length: int) -> int:
    """Bytes of the digest trailer that follows an object of `length` bytes."""
    return _DIGEST.size * layout.chunk_count(length)


def encode_trailer(digests: list[int] | tuple[int, ...]) -> bytes:
    return struct.pack(f"<{len(digests)}Q", *digests)


def decode_trailer(data: bytes | bytearray | memoryview, length: int) -> tuple[int, ...]:
    """The chunk digests of an object of `length` bytes from its trailer (ProtocolError if the
    trailer does not have exactly one digest per chunk)."""
    count = layout.chunk_count(length)
    if len(data) != _DIGEST.size * count:
        raise ProtocolError(f"digest trailer of {len(data)} bytes for {count} chunks")
    return struct.unpack(f"<{count}Q", data)


def object_length(header: DataHeader, payload_length: int) -> int:
    """Object bytes in a PUT/WRITE_BLOCK payload of `payload_length` bytes: all of it, or with a
    digest trailer `header.length` (which must then leave exactly room for the trailer).
    InvalidArgument if the lengths disagree (the frame itself is intact: the receiver drains the
    payload and answers EINVAL)."""
    if not header.digest_trailer:
        if header.length and header.length != payload_length:
            raise InvalidArgument(f"length {header.length} != payload of {payload_length} bytes")
        return payload_length
    if header.length + trailer_size(header.length) != payload_length:
        raise InvalidArgument(f"payload of {payload_length} bytes is not {header.length} bytes + their digest trailer")
    return header.length


@dataclass(frozen=True, slots=True)
class KvScrubPage:
    """A SCRUB_KV reply as a value: the one place that maps the op's fields (see the table above),
    so callers outside the data plane never touch the header's fields."""
    next_after: str        # the cursor to resume from ("" when done)
    done: bool
    objects: int           # KV objects verified
    bytes: int             # bytes verified
    corrupt: tuple[str, ...]   # keys of the corrupt copies (dropped by the worker)


def scrub_kv_request(after: str, budget: int, rate: int) -> DataHeader:
    return DataHeader(key=after, length=budget, offset=rate)


def scrub_kv_reply(page: KvScrubPage) -> DataHeader:
    return DataHeader(key=page.next_after, found=page.done, hit_count=page.objects, length=page.bytes,
                      keys=page.corrupt)


def scrub_kv_page(reply: DataHeader) -> KvScrubPage:
    return KvScrubPage(reply.key, reply.found, reply.hit_count, reply.length, tuple(reply.keys))


@dataclass(frozen=True, slots=True)
class FramePrefix:
    op: Op
    is_response: bool
    request_id: int
    header_length: int
    payload_length: int


def encode(op: Op, request_id: int, header: DataHeader, payload_length: int = 0,
           *, response: bool = False) -> bytes:
    """Prefix + header bytes. The caller sends `payload_length` payload bytes right after."""
    if not 0 <= request_id <= MAX_REQUEST_ID:
        raise LocalProtocolError(f"request id {request_id} out of range")
    if payload_length < 0:
        raise LocalProtocolError("negative payload length")
    allowed = RESPONSE_PAYLOAD_OPS if response else REQUEST_PAYLOAD_OPS
    if payload_length and op not in allowed:
        raise LocalProtocolError(f"{op.name} {'response' if response else 'request'} carries no payload")
    body = header.SerializeToString()
    if len(body) > MAX_HEADER:
        raise LocalProtocolError(f"header of {len(body)} bytes exceeds {MAX_HEADER}")
    code = int(op) | (RESPONSE_BIT if response else 0)
    return PREFIX.pack(MAGIC, VERSION, code, request_id, len(body), payload_length) + body


def decode_prefix(data: bytes | bytearray | memoryview, *, max_payload: int,
                  expect_response: bool) -> FramePrefix:
    """Validates the 20-byte prefix. A payload above `max_payload` raises `TooLarge` before
    a single payload byte is read, so the receiver can refuse it and close."""
    if len(data) != PREFIX_SIZE:
        raise LocalProtocolError(f"prefix must be {PREFIX_SIZE} bytes, got {len(data)}")
    magic, version, code, request_id, header_length, payload_length = PREFIX.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {bytes(magic)!r}")
    if version != VERSION:
        raise ProtocolError(f"unsupported protocol version {version}")
    is_response = bool(code & RESPONSE_BIT)
    if is_response != expect_response:
        raise ProtocolError("unexpected response frame" if is_response else "expected a response frame")
    op = _OPS[code & ~RESPONSE_BIT]
    if op is None:
        raise ProtocolError(f"unknown op {code & ~RESPONSE_BIT}")
    if header_length > MAX_HEADER:
        raise ProtocolError(f"header of {header_length} bytes exceeds {MAX_HEADER}")
    if payload_length:
        allowed = RESPONSE_PAYLOAD_OPS if is_response else REQUEST_PAYLOAD_OPS
        if op not in allowed:
            raise ProtocolError(f"{op.name} frame must not carry a payload")
        if payload_length > max_payload:
            raise TooLarge(f"payload of {payload_length} bytes exceeds the limit of {max_payload}")
    return FramePrefix(op, is_response, request_id, header_length, payload_length)


def decode_header(data: bytes | bytearray | memoryview) -> DataHeader:
    header = DataHeader()
    try:
        header.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise ProtocolError(f"malformed frame header: {exc}") from None
    return header


@dataclass(frozen=True, slots=True)
class Frame:
    prefix: FramePrefix
    header: DataHeader
    payload: bytes


class FrameDecoder:
    """Incremental decoder for byte-stream transports that cannot read exactly (and for fuzzing).

    Feed bytes with `receive`, pull complete frames with `next_frame` (None = need more data).
    Bulk transports should prefer `decode_prefix`/`decode_header` + `recv_into`.
    """

    def __init__(self, *, max_payload: int, expect_response: bool) -> None:
        self._buffer = bytearray()
        self._max_payload = max_payload
        self._expect_response = expect_response
        self._prefix: FramePrefix | None = None

    def receive(self, data: bytes) -> None:
        self._buffer += data

    def next_frame(self) -> Frame | None:
        if self._prefix is None:
            if len(self._buffer) < PREFIX_SIZE:
                return None
            self._prefix = decode_prefix(self._buffer[:PREFIX_SIZE], max_payload=self._max_payload,
                                         expect_response=self._expect_response)
            del self._buffer[:PREFIX_SIZE]
        need = self._prefix.header_length + self._prefix.payload_length
        if len(self._buffer) < need:
            return None
        header = decode_header(self._buffer[:self._prefix.header_length])
        payload = bytes(self._buffer[self._prefix.header_length:need])
        del self._buffer[:need]
        frame, self._prefix = Frame(self._prefix, header, payload), None
        return frame
