"""client/digests.py: receiving a payload chunk by chunk yields exactly the digests the worker
stores (layout.chunk_digests), for every length around the chunk boundaries."""
from __future__ import annotations

import os

import pytest

from curvine_py.client.digests import CHUNK, fill_and_digest
from curvine_py.core import layout


@pytest.mark.parametrize("length", [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 3 * CHUNK + 17])
def test_digests_match_the_stored_chunk_digests(length: int) -> None:
    source = os.urandom(length)
    target = memoryview(bytearray(length))
    calls: list[tuple[int, int]] = []

    def read_into(piece: memoryview, offset: int) -> None:
        calls.append((offset, len(piece)))
        piece[:] = source[offset:offset + len(piece)]

    digests = fill_and_digest(target, read_into)
    assert bytes(target) == source
    assert digests == layout.chunk_digests(source)
    assert [offset for offset, _ in calls] == list(range(0, length, CHUNK))
    assert all(size <= CHUNK for _, size in calls)
    assert sum(size for _, size in calls) == length


def test_a_failing_read_propagates() -> None:
    target = memoryview(bytearray(2 * CHUNK))

    def read_into(piece: memoryview, offset: int) -> None:
        if offset:
            raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        fill_and_digest(target, read_into)
