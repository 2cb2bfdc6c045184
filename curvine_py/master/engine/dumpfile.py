"""The file `curvine-py meta dump` writes and `meta load` reads: an lz4 frame (with its content
checksum) holding a stream of records, each `kind:u8 length:u32 payload`:

    H  header: JSON {"format", "schema_version", "next_ino", "rows", "tables": {name: [columns]}}
    R  one row: table:u16 count:u16, then each value as tag:u8 and its bytes
       (N null, I int64, F float64, T utf-8 text u32-length-prefixed, B blob u32-length-prefixed)
    E  trailer: the number of R records:u64 and the SHA-256 of every byte before the trailer

A reader hands out rows as it goes, and raises Corrupt when the stream ends without the trailer,
when the count or the digest differs, or when anything follows it: the loader applies rows inside
one transaction and commits only after the trailer checked out, so a damaged file loads nothing.
"""
from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import lz4.frame  # type: ignore[import-untyped]  # lz4 ships no type information

from curvine_py.core.errors import Corrupt

FORMAT = 1
_RECORD = struct.Struct(">BI")
_ROW = struct.Struct(">HH")
_INT = struct.Struct(">q")
_FLOAT = struct.Struct(">d")
_LEN = struct.Struct(">I")
_TRAILER = struct.Struct(">Q32s")
_MAX_RECORD = 64 << 20           # a row is a few KiB at most (an xattr value is <= 64 KiB)

Value = int | float | str | bytes | None


@dataclass(frozen=True, slots=True)
class Header:
    schema_version: int
    next_ino: int                              # the next inode number the store hands out
    rows: int                                  # how many rows follow (for progress)
    tables: tuple[tuple[str, tuple[str, ...]], ...]   # (table, its columns), in dump order


def encode_row(table: int, values: Sequence[Value]) -> bytes:
    out = [_ROW.pack(table, len(values))]
    for value in values:
        if value is None:
            out.append(b"N")
        elif isinstance(value, bool | int):
            out.append(b"I" + _INT.pack(int(value)))
        elif isinstance(value, float):
            out.append(b"F" + _FLOAT.pack(value))
        elif isinstance(value, str):
            data = value.encode("utf-8", "surrogateescape")
            out.append(b"T" + _LEN.pack(len(data)) + data)
        elif isinstance(value, bytes | memoryview):
            data = bytes(value)
            out.append(b"B" + _LEN.pack(len(data)) + data)
        else:
            raise TypeError(f"cannot dump a {type(value).__name__}")
    return b"".join(out)


def decode_row(payload: bytes) -> tuple[int, tuple[Value, ...]]:
    try:
        table, count = _ROW.unpack_from(payload, 0)
        pos = _ROW.size
        values: list[Value] = []
        for _ in range(count):
            tag = payload[pos:pos + 1]
            pos += 1
            if tag == b"N":
                values.append(None)
            elif tag == b"I":
                values.append(_INT.unpack_from(payload, pos)[0])
                pos += _INT.size
            elif tag == b"F":
                values.append(_FLOAT.unpack_from(payload, pos)[0])
                pos += _FLOAT.size
            elif tag in (b"T", b"B"):
                (size,) = _LEN.unpack_from(payload, pos)
                pos += _LEN.size
                data = payload[pos:pos + size]
                if len(data) != size:
                    raise Corrupt("a value runs past its record")
                pos += size
                values.append(data.decode("utf-8", "surrogateescape") if tag == b"T" else bytes(data))
            else:
                raise Corrupt(f"unknown value tag {tag!r}")
    except struct.error:
        raise Corrupt("a row record is cut short") from None
    if pos != len(payload):
        raise Corrupt("a row record has trailing bytes")
    return table, tuple(values)


class DumpWriter:
    """Writes one dump to a binary file object (closed by `close`, which writes the trailer)."""

    def __init__(self, fileobj: IO[bytes], header: Header) -> None:
        self._out: Any = lz4.frame.LZ4FrameFile(fileobj, mode="wb", content_checksum=True)
        self._digest = hashlib.sha256()
        self._rows = 0
        meta = {"format": FORMAT, "schema_version": header.schema_version, "next_ino": header.next_ino,
                "rows": header.rows, "tables": {name: list(cols) for name, cols in header.tables}}
        self._record(b"H", json.dumps(meta, separators=(",", ":")).encode())

    def _record(self, kind: bytes, payload: bytes) -> None:
        data = _RECORD.pack(kind[0], len(payload)) + payload
        self._digest.update(data)
        self._out.write(data)

    def row(self, table: int, values: Sequence[Value]) -> None:
        self._record(b"R", encode_row(table, values))
        self._rows += 1

    def close(self) -> int:
        """Writes the trailer and ends the frame; returns the number of rows written."""
        trailer = _TRAILER.pack(self._rows, self._digest.digest())
        self._out.write(_RECORD.pack(ord("E"), len(trailer)) + trailer)
        self._out.close()
        return self._rows


class DumpReader:
    """Reads one dump: `header` at once, then `rows()` yields (table name, columns, values) and
    verifies the trailer after the last row (raising Corrupt, the caller then rolls back)."""

    def __init__(self, fileobj: IO[bytes], name: str = "dump") -> None:
        self._name = name
        self._in: Any = lz4.frame.LZ4FrameFile(fileobj, mode="rb")
        self._digest = hashlib.sha256()
        kind, payload = self._next()
        if kind != b"H":
            raise Corrupt(f"{name}: not a curvine-py metadata dump (no header record)")
        try:
            meta = json.loads(payload)
            if meta["format"] != FORMAT:
                raise Corrupt(f"{name}: dump format {meta['format']}, this build reads {FORMAT}")
            self.header = Header(int(meta["schema_version"]), int(meta["next_ino"]), int(meta["rows"]),
                                 tuple((str(t), tuple(str(c) for c in cols)) for t, cols in meta["tables"].items()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Corrupt(f"{name}: the dump's header is damaged") from None

    def _read(self, size: int) -> bytes:
        try:
            data: bytes = self._in.read(size)
        except EOFError:
            raise Corrupt(f"{self._name}: the dump is truncated (the compressed stream ends early)") from None
        except RuntimeError as exc:   # lz4: a bad block or content checksum
            raise Corrupt(f"{self._name}: the dump is damaged ({exc})") from None
        except OSError as exc:
            raise Corrupt(f"{self._name}: not an lz4 dump or damaged ({exc})") from None
        return data

    def _next(self) -> tuple[bytes, bytes]:
        head = self._read(_RECORD.size)
        if len(head) != _RECORD.size:
            raise Corrupt(f"{self._name}: the dump is truncated (no trailer: the writer did not finish)")
        kind, size = _RECORD.unpack(head)
        if size > _MAX_RECORD:
            raise Corrupt(f"{self._name}: a record claims {size} bytes")
        payload = self._read(size)
        if len(payload) != size:
            raise Corrupt(f"{self._name}: the dump is truncated inside a record")
        if kind != ord("E"):
            self._digest.update(head + payload)
        return bytes([kind]), payload

    def rows(self) -> Iterator[tuple[str, tuple[str, ...], tuple[Value, ...]]]:
        tables = self.header.tables
        count = 0
        while True:
            kind, payload = self._next()
            if kind == b"R":
                index, values = decode_row(payload)
                if index >= len(tables) or len(values) != len(tables[index][1]):
                    raise Corrupt(f"{self._name}: a row does not fit the header's tables")
                count += 1
                yield tables[index][0], tables[index][1], values
            elif kind == b"E":
                break
            else:
                raise Corrupt(f"{self._name}: unexpected record {kind!r}")
        if len(payload) != _TRAILER.size:
            raise Corrupt(f"{self._name}: the trailer is damaged")
        want_rows, want_digest = _TRAILER.unpack(payload)
        if want_rows != count or want_digest != self._digest.digest():
            raise Corrupt(f"{self._name}: checksum mismatch (the trailer says {want_rows} rows, "
                          f"read {count}): the dump was altered")
        if want_rows != self.header.rows:
            raise Corrupt(f"{self._name}: the header promised {self.header.rows} rows, the dump holds {want_rows}")
        if self._read(1):
            raise Corrupt(f"{self._name}: bytes follow the trailer")
