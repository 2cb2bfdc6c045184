"""Sans-IO codec for LMCache 0.5.6's `lm://` server protocol, from the server's side.

A worker that speaks `lm://` lets a stock LMCache engine (`remote_url: lm://host:port`) use
curvine-py with nothing installed next to vLLM. This module owns the bytes only: parsing request
headers, encoding reply headers, and the 28-byte object descriptor a server keeps next to each
object so a GET can echo what the PUT described. Transports (asyncio, blocking) move the payload
themselves.

Wire format (verified against lmcache 0.5.6: `lmcache/v1/protocol.py` ClientMetaMessage /
ServerMetaMessage, `lmcache/v1/storage_backend/connector/lm_connector.py` the client,
`lmcache/v1/server/__main__.py` the stock server). LMCache packs with native `struct` formats
(`"iiiiiiiii150s"`, `"iiiiiiiii"`): int32, no padding, little-endian on every platform it ships for;
we spell that out as `<`.

Request, client -> server, 186 bytes::

    0   i32  command     PUT=1 GET=2 EXIST=3 LIST=4 HEALTH=5
    4   i32  length      PUT: payload bytes that follow the header; otherwise 0
    8   i32  fmt         MemoryFormat (GET/EXIST send 1)
    12  i32  dtype       dtype code (GET/EXIST send 2, fp16)
    16  i32  location    always 0 from the 0.5.6 client
    20  4xi32 shape      right-padded with zeros to 4 dims (GET/EXIST send zeros)
    36  150s key         CacheEngineKey.to_string(), UTF-8, right-padded with spaces

Reply, server -> client, 36 bytes (note: `location` moves to the END)::

    0   i32  code        SUCCESS=200 FAIL=400
    4   i32  length      GET hit: payload bytes that follow; otherwise 0
    8   i32  fmt
    12  i32  dtype
    16  4xi32 shape
    32  i32  location    0

Per op: PUT has NO reply (fire-and-forget; the server must consume exactly `length` bytes).
GET replies a header {200, len, fmt, dtype, shape, 0} + payload, or FAIL_REPLY. EXIST replies
SUCCESS_REPLY or FAIL_REPLY. HEALTH replies SUCCESS_REPLY (the 0.5.6 client never sends it).
LIST is not implemented by the stock server (it sends nothing); the 0.5.6 client never sends it.

The stock client reads each reply header with ONE `recv(36)` and no loop: a server must hand the
36 bytes to the kernel in one write (ideally header + payload in one `sendmsg`).

Error handling: bytes from the peer that cannot be a valid request raise `ProtocolError` (drop the
connection: with no request ids there is no way to resynchronise); a PUT announcing more than the
configured maximum raises `TooLarge` before any payload byte is read (also drop: the client does
not wait for an answer); misuse by this process (wrong buffer size, out-of-range values to encode)
raises `LocalProtocolError`.
"""
from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass

from curvine_py.core.errors import LocalProtocolError, ProtocolError, TooLarge

MAX_KEY_LENGTH = 150  # lmcache.v1.protocol.MAX_KEY_LENGTH; the client asserts len(key) <= 150
REQUEST = struct.Struct(f"<9i{MAX_KEY_LENGTH}s")
REPLY = struct.Struct("<9i")
REQUEST_SIZE = REQUEST.size  # 186
REPLY_SIZE = REPLY.size  # 36
# The object descriptor, laid out exactly as LMCache's RemoteMetadata for one KV group
# (length, fmt, dtype, shape0..3): the same 28 bytes fs:// files and redis `<key>metadata` carry.
DESCRIPTOR = struct.Struct("<7i")
DESCRIPTOR_SIZE = DESCRIPTOR.size  # 28
INT32_MAX = 2**31 - 1  # `length` is a signed int32 on the wire: 2 GiB - 1 per object at most
DEFAULT_MAX_PAYLOAD = INT32_MAX


class Command(enum.IntEnum):
    PUT = 1
    GET = 2
    EXIST = 3
    LIST = 4
    HEALTH = 5


class ReturnCode(enum.IntEnum):
    SUCCESS = 200
    FAIL = 400


class MemoryFormat(enum.IntEnum):
    """lmcache.v1.memory_management.MemoryFormat values. A server stores and echoes them."""

    UNDEFINED = 0
    KV_2LTD = 1  # [2, layers, tokens, heads*head_dim]: the normal non-MLA chunk
    KV_T2D = 2
    KV_2TD = 3
    BINARY = 4
    BINARY_BUFFER = 5  # cachegen output, shape [nbytes, 0, 0, 0]
    KV_MLA_FMT = 6
    EC_TD = 7
    HS_TD = 8


class Dtype(enum.IntEnum):
    """lmcache.v1.protocol INT_TO_DTYPE codes. The client always sends 2 for fp16 (torch.half is
    torch.float16, so the later dict entry wins); 1 decodes as fp16 too."""

    NONE = 0
    HALF = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    FLOAT32 = 4
    FLOAT64 = 5
    UINT8 = 6
    FLOAT8_E4M3FN = 7
    FLOAT8_E5M2 = 8


DTYPE_ITEMSIZE: dict[Dtype, int] = {
    Dtype.HALF: 2, Dtype.FLOAT16: 2, Dtype.BFLOAT16: 2, Dtype.FLOAT32: 4, Dtype.FLOAT64: 8,
    Dtype.UINT8: 1, Dtype.FLOAT8_E4M3FN: 1, Dtype.FLOAT8_E5M2: 1,
}
# LOCATION_TO_INT: None=0, LocalCPUBackend=1, LocalDiskBackend=2. Only 0 is ever sent.
_LOCATIONS = frozenset({0, 1, 2})
# Ops whose request names an object; HEALTH/LIST may carry any (even an empty) key.
KEYED_COMMANDS = frozenset({Command.PUT, Command.GET, Command.EXIST})

Shape = tuple[int, int, int, int]
ZERO_SHAPE: Shape = (0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a PUT says about its payload and a GET hit must echo: fmt, dtype, 4-d shape, length.

    A server treats it as opaque: the 0.5.6 client allocates `shape` x `dtype` in `fmt` from the
    reply and then receives exactly `length` bytes into it, trusting both. `length` need not equal
    prod(shape) * itemsize (multi-group objects describe only their first group), so the codec
    never enforces it; `expected_length` is there for callers that want to check.
    """

    length: int
    fmt: int = MemoryFormat.KV_2LTD
    dtype: int = Dtype.FLOAT16
    shape: Shape = ZERO_SHAPE

    def pack(self) -> bytes:
        """The 28-byte descriptor (= LMCache RemoteMetadata for one group)."""
        _check_int32("length", self.length, minimum=0)
        _check_int32("fmt", self.fmt)
        _check_int32("dtype", self.dtype)
        for dim in self.shape:
            _check_int32("shape", dim, minimum=0)
        if len(self.shape) != 4:
            raise LocalProtocolError(f"shape must have 4 dims, got {self.shape!r}")
        return DESCRIPTOR.pack(self.length, self.fmt, self.dtype, *self.shape)

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> ObjectMeta:
        """Reads a stored descriptor (our own bytes: damage is ProtocolError, like a bad frame)."""
        if len(data) != DESCRIPTOR_SIZE:
            raise LocalProtocolError(f"descriptor must be {DESCRIPTOR_SIZE} bytes, got {len(data)}")
        length, fmt, dtype, s0, s1, s2, s3 = DESCRIPTOR.unpack(data)
        return _validated_meta(length, fmt, dtype, (s0, s1, s2, s3))

    def expected_length(self) -> int | None:
        """prod(shape without trailing zero padding) * itemsize, or None when the format or dtype
        has no fixed element size (BINARY*, UNDEFINED, dtype NONE)."""
        itemsize = DTYPE_ITEMSIZE.get(Dtype(self.dtype)) if self.dtype in _DTYPE_VALUES else None
        if itemsize is None or self.fmt in (MemoryFormat.UNDEFINED, MemoryFormat.BINARY,
                                            MemoryFormat.BINARY_BUFFER):
            return None
        dims = list(self.shape)
        while len(dims) > 1 and dims[-1] == 0:  # lmcache strip_shape_padding
            dims.pop()
        return math.prod(dims) * itemsize


_DTYPE_VALUES = frozenset(int(d) for d in Dtype)
_FMT_VALUES = frozenset(int(f) for f in MemoryFormat)


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request header. For PUT, `meta.length` payload bytes follow on the stream."""

    command: Command
    key: str
    meta: ObjectMeta
    location: int = 0

    @property
    def payload_length(self) -> int:
        """Bytes the server must consume after this header before the next one."""
        return self.meta.length if self.command is Command.PUT else 0


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply header (the server encodes it; tests and probe clients decode it)."""

    code: ReturnCode
    meta: ObjectMeta
    location: int = 0

    @property
    def ok(self) -> bool:
        return self.code is ReturnCode.SUCCESS


def _check_int32(name: str, value: int, *, minimum: int = -(2**31)) -> None:
    if not isinstance(value, int) or not minimum <= value <= INT32_MAX:
        raise LocalProtocolError(f"{name}={value!r} does not fit the wire field")


def _validated_meta(length: int, fmt: int, dtype: int, shape: Shape) -> ObjectMeta:
    if length < 0:
        raise ProtocolError(f"negative length {length}")
    if fmt not in _FMT_VALUES:
        raise ProtocolError(f"unknown memory format {fmt}")
    if dtype not in _DTYPE_VALUES:
        raise ProtocolError(f"unknown dtype code {dtype}")
    if any(dim < 0 for dim in shape):
        raise ProtocolError(f"negative dimension in shape {shape}")
    return ObjectMeta(length, MemoryFormat(fmt), Dtype(dtype), shape)


def _bad_key_chars(key: str) -> bool:
    return any(ch < " " or ch == "\x7f" for ch in key)


def _decode_key(raw: bytes) -> str:
    # The client pads with spaces (bytes.ljust); the stock server does decode().strip(). A C client
    # packing "150s" pads with NULs instead: accept both paddings, but nothing else unprintable.
    try:
        key = raw.rstrip(b"\x00").decode("utf-8").strip(" ")
    except UnicodeDecodeError:
        raise ProtocolError("request key is not valid UTF-8") from None
    if _bad_key_chars(key):
        raise ProtocolError(f"request key contains control characters: {key!r}")
    return key


def parse_request(header: bytes | bytearray | memoryview, *,
                  max_payload: int = DEFAULT_MAX_PAYLOAD) -> Request:
    """Parses exactly REQUEST_SIZE bytes. A PUT announcing more than `max_payload` bytes raises
    `TooLarge` (the payload is still on the stream: the caller drops the connection)."""
    if len(header) != REQUEST_SIZE:
        raise LocalProtocolError(f"request header must be {REQUEST_SIZE} bytes, got {len(header)}")
    command, length, fmt, dtype, location, s0, s1, s2, s3, raw_key = REQUEST.unpack(header)
    try:
        cmd = Command(command)
    except ValueError:
        raise ProtocolError(f"unknown lm:// command {command}") from None
    meta = _validated_meta(length, fmt, dtype, (s0, s1, s2, s3))
    if location not in _LOCATIONS:
        raise ProtocolError(f"unknown location code {location}")
    if cmd is not Command.PUT and length != 0:
        # Only PUT carries a payload; a non-zero length elsewhere means we lost the framing.
        raise ProtocolError(f"{cmd.name} request with length {length}")
    if cmd is Command.PUT and length > max_payload:
        raise TooLarge(f"PUT of {length} bytes exceeds the limit of {max_payload}")
    key = _decode_key(raw_key)
    if cmd in KEYED_COMMANDS and not key:
        raise ProtocolError(f"{cmd.name} request without a key")
    return Request(cmd, key, meta, location)


def encode_reply(code: ReturnCode, meta: ObjectMeta | None = None) -> bytes:
    """36 reply-header bytes. Without `meta`, the fields the stock server sends on FAIL, EXIST
    and HEALTH: length 0, fmt 1 (KV_2LTD), dtype 2 (fp16), zero shape."""
    meta = meta if meta is not None else _EMPTY_META
    _check_int32("length", meta.length, minimum=0)
    _check_int32("fmt", meta.fmt)
    _check_int32("dtype", meta.dtype)
    if len(meta.shape) != 4:
        raise LocalProtocolError(f"shape must have 4 dims, got {meta.shape!r}")
    for dim in meta.shape:
        _check_int32("shape", dim, minimum=0)
    return REPLY.pack(int(code), meta.length, meta.fmt, meta.dtype, *meta.shape, 0)


_EMPTY_META = ObjectMeta(0, MemoryFormat.KV_2LTD, Dtype.FLOAT16, ZERO_SHAPE)
SUCCESS_REPLY = encode_reply(ReturnCode.SUCCESS)  # EXIST hit, HEALTH
FAIL_REPLY = encode_reply(ReturnCode.FAIL)  # GET miss, EXIST miss: byte-identical to the stock server


def encode_hit(meta: ObjectMeta) -> bytes:
    """The GET-hit header; the caller sends exactly `meta.length` payload bytes right after it."""
    return encode_reply(ReturnCode.SUCCESS, meta)


def encode_exist(found: bool) -> bytes:
    return SUCCESS_REPLY if found else FAIL_REPLY


# -- client side: used by tests, probes and conformance tools (LMCache itself is the real client)

def encode_request(command: Command, key: str, meta: ObjectMeta | None = None) -> bytes:
    """186 request-header bytes as lmcache's ClientMetaMessage.serialize writes them. Without
    `meta`, the fields the 0.5.6 client sends for GET/EXIST: length 0, fmt 1, dtype 2, zero shape."""
    meta = meta if meta is not None else _EMPTY_META
    if _bad_key_chars(key) or key != key.strip(" "):
        raise LocalProtocolError(f"key {key!r} would not survive the wire (control chars, edge spaces)")
    raw_key = key.encode("utf-8")
    if len(raw_key) > MAX_KEY_LENGTH:
        raise LocalProtocolError(f"key of {len(raw_key)} bytes exceeds {MAX_KEY_LENGTH}")
    if command is not Command.PUT and meta.length:
        raise LocalProtocolError(f"{command.name} carries no payload")
    _check_int32("length", meta.length, minimum=0)
    if len(meta.shape) != 4:
        raise LocalProtocolError(f"shape must have 4 dims, got {meta.shape!r}")
    for dim in meta.shape:
        _check_int32("shape", dim, minimum=0)
    return REQUEST.pack(int(command), meta.length, meta.fmt, meta.dtype, 0, *meta.shape,
                        raw_key.ljust(MAX_KEY_LENGTH))


def parse_reply(header: bytes | bytearray | memoryview) -> Reply:
    if len(header) != REPLY_SIZE:
        raise LocalProtocolError(f"reply header must be {REPLY_SIZE} bytes, got {len(header)}")
    code, length, fmt, dtype, s0, s1, s2, s3, location = REPLY.unpack(header)
    try:
        rc = ReturnCode(code)
    except ValueError:
        raise ProtocolError(f"unknown lm:// return code {code}") from None
    if location not in _LOCATIONS:
        raise ProtocolError(f"unknown location code {location}")
    return Reply(rc, _validated_meta(length, fmt, dtype, (s0, s1, s2, s3)), location)


class RequestDecoder:
    """Incremental request decoder for transports that cannot read exactly, and for fuzzing.

    `receive(data)` feeds bytes; `next_request()` returns `(Request, payload)` once a whole request
    (header + PUT payload) is buffered, else None. `receive_eof()` raises `ProtocolError` if the
    peer closed mid-request. Bulk transports should use `parse_request` + `recv_into` instead:
    this buffers PUT payloads in memory.
    """

    def __init__(self, *, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self._buffer = bytearray()
        self._max_payload = max_payload
        self._pending: Request | None = None

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data

    def receive_eof(self) -> None:
        if self._buffer or self._pending is not None:
            raise ProtocolError(f"connection closed mid-request ({len(self._buffer)} bytes buffered)")

    def next_request(self) -> tuple[Request, bytes] | None:
        if self._pending is None:
            if len(self._buffer) < REQUEST_SIZE:
                return None
            self._pending = parse_request(bytes(self._buffer[:REQUEST_SIZE]),
                                          max_payload=self._max_payload)
            del self._buffer[:REQUEST_SIZE]
        need = self._pending.payload_length
        if len(self._buffer) < need:
            return None
        payload = bytes(self._buffer[:need])
        del self._buffer[:need]
        request, self._pending = self._pending, None
        return request, payload
