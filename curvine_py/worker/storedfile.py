"""An open stored file (a `StoredHeader`, core/layout.py, followed by the payload at `header_size`)
and the verification of its bytes against the per-1 MiB chunk digests of its header."""
from __future__ import annotations

import os
from typing import Self

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt

CHUNK = layout.CHUNK_SIZE


def read_header(fd: int) -> layout.StoredHeader:
    """Parses the header of an open stored file (ProtocolError if it is not one)."""
    head = os.pread(fd, layout.PAGE, 0)
    size = layout.StoredHeader.peek_size(head)
    if size > len(head):
        head = os.pread(fd, size, 0)
    return layout.StoredHeader.decode(head)


class StoredFile:
    """An open stored file. The fd keeps reading the same bytes even if the file is evicted,
    deleted or replaced meanwhile. Close it (it is a context manager)."""

    def __init__(self, fd: int, header: layout.StoredHeader, data_offset: int | None = None,
                 memo: dict[str, bytes] | None = None) -> None:
        """`data_offset`: the header's size when the caller knows it (the fd cache keeps it:
        computing it takes a dozen calls, on every request). `memo`: bytes derived from `header`
        alone (the encoded header of a GET reply), shared by every open of this very file that the
        fd cache hands out, so they are built once per cached file, not once per request."""
        self.fd = fd
        self.header = header
        self.data_offset = header.header_size if data_offset is None else data_offset
        self.memo: dict[str, bytes] = {} if memo is None else memo

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """Payload bytes [offset, offset+length) (for tests and small control paths; the data
        plane uses sendfile or passes the fd)."""
        end = self.header.length if length is None else min(self.header.length, offset + length)
        out = bytearray()
        while offset + len(out) < end:
            piece = os.pread(self.fd, end - offset - len(out), self.data_offset + offset + len(out))
            if not piece:
                raise Corrupt("stored file is shorter than its header says")
            out += piece
        return bytes(out)

    def _verified(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the payload, after checking every stored chunk they touch."""
        first, last = start // CHUNK, (end - 1) // CHUNK
        base = first * CHUNK
        raw = self.read(base, min((last + 1) * CHUNK, self.header.length) - base)
        for index in range(first, last + 1):
            piece = raw[(index - first) * CHUNK:(index - first + 1) * CHUNK]
            if layout.checksum(piece) != self.header.chunk_checksums[index]:
                raise Corrupt(f"stored chunk {index} fails its checksum")
        return raw[start - base:end - base]

    def range_digests(self, offset: int, length: int) -> list[int]:
        """Digests of the reply payload [offset, offset+length) cut in 1 MiB pieces from its start,
        which is what a reader recomputes. A piece that is a whole stored chunk (offset chunk-aligned,
        the usual case) reuses the stored digest; an edge piece is read, its stored chunk verified
        (Corrupt if bad: bad bytes are never vouched for) and the piece digested."""
        digests: list[int] = []
        position, end = offset, offset + length
        while position < end:
            piece_end = min(position + CHUNK, end)
            aligned = position % CHUNK == 0
            if aligned and (piece_end - position == CHUNK or piece_end == self.header.length):
                digests.append(self.header.chunk_checksums[position // CHUNK])
            else:
                digests.append(layout.checksum(self._verified(position, piece_end)))
            position = piece_end
        return digests

    def verify_chunk(self, index: int) -> int:
        """Re-reads stored chunk `index` and checks it against its digest; returns its length.
        Corrupt if it fails (or the file is shorter than its header says)."""
        start = index * CHUNK
        piece = self.read(start, min(CHUNK, self.header.length - start))
        if layout.checksum(piece) != self.header.chunk_checksums[index]:
            raise Corrupt(f"stored chunk {index} fails its checksum")
        return len(piece)

    def verify_summary(self) -> None:
        """The header's own consistency: the object checksum is the combination of the chunk
        digests, and the file holds exactly header + payload (Corrupt otherwise)."""
        if layout.combine(list(self.header.chunk_checksums)) != self.header.checksum:
            raise Corrupt("the stored checksum does not match its chunk digests")
        size = os.fstat(self.fd).st_size
        if size != self.header.header_size + self.header.length:
            raise Corrupt(f"stored file is {size} bytes, its header says {self.header.header_size} + "
                          f"{self.header.length}")

    def verify(self) -> bool:
        """Recomputes every chunk digest of the payload (used before dropping a reported copy)."""
        position = 0
        try:
            for expected in self.header.chunk_checksums:
                if layout.checksum(self.read(position, CHUNK)) != expected:
                    return False
                position += CHUNK
        except (OSError, Corrupt):
            return False
        return layout.combine(list(self.header.chunk_checksums)) == self.header.checksum
