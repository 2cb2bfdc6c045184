"""Block layout math and the on-disk format of stored objects (blocks and KV objects).

A stored file is a header (a multiple of 4 KiB) followed by the payload. The header keeps everything
needed to rebuild a worker's inventory from disk (id or key, length, per-chunk checksums, class, TTL,
user metadata) and its size keeps the payload page-aligned, so `preadv` into aligned buffers and
O_DIRECT stay possible.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import xxhash

from curvine_py.core.errors import InvalidArgument, ProtocolError

PAGE = 4096
CHUNK_SIZE = 1 << 20  # integrity unit: every 1 MiB of payload has its own xxh3_64 digest
_FIXED = struct.Struct("<4sHBBIQQQQQHII")
# magic ver kind class header_size length checksum created ttl block_id key_len meta_len n_chunks
_MAGIC = b"CVOB"
_VERSION = 1
MAX_USER_META = 4096
KIND_BLOCK = 1
KIND_OBJECT = 2


# checksum(data) -> int: xxh3_64 of one buffer (~10x faster than crc32 here, cheap enough to verify
# every read). The C function itself, not a wrapper: it runs once per chunk on every request path,
# and a Python frame around it is a measurable share of a small get (bench/kv_profile.py).
checksum: Callable[[bytes | bytearray | memoryview], int] = xxhash.xxh3_64_intdigest


def chunk_digests(data: bytes | bytearray | memoryview, chunk_size: int = CHUNK_SIZE) -> list[int]:
    view = memoryview(data).cast("B")
    return [checksum(view[i:i + chunk_size]) for i in range(0, len(view), chunk_size)]


def combine(digests: list[int] | tuple[int, ...]) -> int:
    """The object/block checksum: xxh3_64 over the packed chunk digests (a one-level hash tree),
    so writer and reader agree on it without hashing the payload twice."""
    return checksum(struct.pack(f"<{len(digests)}Q", *digests))


def object_checksum(data: bytes | bytearray | memoryview) -> int:
    return combine(chunk_digests(data))


def chunk_count(length: int, chunk_size: int = CHUNK_SIZE) -> int:
    return -(-length // chunk_size)


def object_file_name(key: str) -> str:
    """KV objects are stored under a hash of their key: a key never becomes a path component."""
    return xxhash.xxh3_128_hexdigest(key.encode("utf-8"))


def block_file_name(block_id: int) -> str:
    return f"{block_id:016x}"


def shard_dir(file_name: str) -> str:
    """Two hex characters of fan-out keep directories small (256 shards)."""
    return file_name[-2:]


@dataclass(frozen=True, slots=True)
class StoredHeader:
    """Header of a stored file; `header_size` is a multiple of 4 KiB so the payload that follows
    stays page-aligned."""
    kind: int
    storage_class: int
    length: int
    checksum: int
    created_ms: int
    ttl_ms: int
    block_id: int = 0
    key: str = ""
    user_meta: bytes = b""
    chunk_checksums: tuple[int, ...] = ()

    @property
    def header_size(self) -> int:
        raw = _FIXED.size + len(self.key.encode("utf-8")) + len(self.user_meta) + 8 * len(self.chunk_checksums)
        return -(-raw // PAGE) * PAGE

    def encode(self) -> bytes:
        key = self.key.encode("utf-8")
        if len(self.user_meta) > MAX_USER_META:
            raise InvalidArgument(f"object metadata of {len(self.user_meta)} bytes exceeds {MAX_USER_META}")
        if len(self.chunk_checksums) != chunk_count(self.length):
            raise InvalidArgument("chunk checksums do not cover the payload")
        size = self.header_size
        fixed = _FIXED.pack(_MAGIC, _VERSION, self.kind, self.storage_class, size, self.length,
                            self.checksum, self.created_ms, self.ttl_ms, self.block_id, len(key),
                            len(self.user_meta), len(self.chunk_checksums))
        digests = struct.pack(f"<{len(self.chunk_checksums)}Q", *self.chunk_checksums)
        return (fixed + key + self.user_meta + digests).ljust(size, b"\0")

    @staticmethod
    def peek_size(raw: bytes) -> int:
        """Header size from its first bytes (read PAGE bytes, then the rest if larger)."""
        if len(raw) < _FIXED.size or raw[:4] != _MAGIC:
            raise ProtocolError("not a curvine object file")
        size = int(_FIXED.unpack_from(raw)[4])
        if size % PAGE or size <= 0 or size > 64 * PAGE:
            raise ProtocolError(f"stored header size {size} out of range")
        return size

    @classmethod
    def decode(cls, raw: bytes) -> StoredHeader:
        if len(raw) < _FIXED.size:
            raise ProtocolError("stored object header truncated")
        (magic, version, kind, storage_class, size, length, digest, created, ttl, block_id, key_len,
         meta_len, n_chunks) = _FIXED.unpack_from(raw)
        if magic != _MAGIC or version != _VERSION:
            raise ProtocolError("not a curvine object file")
        end_key = _FIXED.size + key_len
        end_meta = end_key + meta_len
        end = end_meta + 8 * n_chunks
        if end > min(len(raw), size) or n_chunks != chunk_count(length):
            raise ProtocolError("stored object header lengths out of range")
        key = raw[_FIXED.size:end_key].decode("utf-8")
        digests = struct.unpack_from(f"<{n_chunks}Q", raw, end_meta)
        return cls(kind, storage_class, length, digest, created, ttl, block_id, key,
                   bytes(raw[end_key:end_meta]), tuple(digests))


@dataclass(frozen=True, slots=True)
class Extent:
    """A piece of a file read or write that falls inside one block."""
    index: int          # block index in the file
    block_offset: int   # offset inside the block
    length: int
    buffer_offset: int  # offset in the caller's buffer


def extents(offset: int, length: int, block_size: int) -> Iterator[Extent]:
    """Splits the byte range [offset, offset+length) into per-block pieces."""
    if offset < 0 or length < 0 or block_size <= 0:
        raise InvalidArgument("offset and length must be >= 0 and block_size > 0")
    done = 0
    while done < length:
        position = offset + done
        index, inner = divmod(position, block_size)
        piece = min(block_size - inner, length - done)
        yield Extent(index, inner, piece, done)
        done += piece


def block_count(size: int, block_size: int) -> int:
    return -(-size // block_size) if size > 0 else 0
