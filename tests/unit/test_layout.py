"""Block layout math and the stored-file header."""
from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curvine_py.core import layout
from curvine_py.core.errors import InvalidArgument, ProtocolError


@given(offset=st.integers(0, 10**12), length=st.integers(0, 10**7), block=st.integers(4096, 10**7))
def test_extents_tile_the_range_without_crossing_blocks(offset: int, length: int, block: int) -> None:
    pieces = list(layout.extents(offset, length, block))
    assert sum(p.length for p in pieces) == length
    position = offset
    for piece in pieces:
        assert piece.index * block + piece.block_offset == position
        assert 0 < piece.length and piece.block_offset + piece.length <= block
        assert piece.buffer_offset == position - offset
        position += piece.length


def test_block_count() -> None:
    assert [layout.block_count(n, 10) for n in (0, 1, 10, 11, 100)] == [0, 1, 1, 2, 10]


def test_negative_ranges_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        list(layout.extents(-1, 5, 10))


@given(key=st.text(max_size=300), meta=st.binary(max_size=layout.MAX_USER_META),
       length=st.integers(0, 300 << 20))
def test_header_round_trip_keeps_payload_page_aligned(key: str, meta: bytes, length: int) -> None:
    digests = tuple(range(layout.chunk_count(length)))
    header = layout.StoredHeader(layout.KIND_OBJECT, 1, length, 42, 1, 2, 0, key, meta, digests)
    raw = header.encode()
    assert len(raw) % layout.PAGE == 0 and len(raw) == header.header_size
    assert layout.StoredHeader.peek_size(raw[:layout.PAGE]) == len(raw)
    assert layout.StoredHeader.decode(raw) == header


def test_corrupt_headers_are_detected() -> None:
    good = layout.StoredHeader(layout.KIND_BLOCK, 2, 5, 1, 0, 0, 7, "", b"", (9,)).encode()
    with pytest.raises(ProtocolError):
        layout.StoredHeader.decode(b"XXXX" + good[4:])
    with pytest.raises(ProtocolError):
        layout.StoredHeader.decode(good[:10])
    with pytest.raises(InvalidArgument):
        layout.StoredHeader(layout.KIND_BLOCK, 2, 5 << 20, 1, 0, 0, 7, "", b"", (9,)).encode()


def test_checksum_is_per_chunk_and_combined() -> None:
    data = os.urandom(3 * layout.CHUNK_SIZE + 17)
    digests = layout.chunk_digests(data)
    assert len(digests) == 4
    assert layout.object_checksum(data) == layout.combine(digests)
    flipped = bytearray(data)
    flipped[2 * layout.CHUNK_SIZE + 5] ^= 1
    changed = layout.chunk_digests(flipped)
    assert [a == b for a, b in zip(digests, changed, strict=True)] == [True, True, False, True]


def test_file_names_never_come_from_user_strings() -> None:
    for key in ("../../etc/passwd", "/abs", "a/b", "\x00"):
        name = layout.object_file_name(key)
        assert "/" not in name and ".." not in name and len(name) == 32
    assert layout.shard_dir(layout.block_file_name(0x1ab)) == "ab"
