"""core/rules.py: the verifiable read range and the truncate map, as properties."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curvine_py.core.errors import InvalidArgument
from curvine_py.core.rules import truncate_map, verifiable_range

CHUNK = 64   # small chunks make every boundary case reachable


@st.composite
def stored_blocks(draw: st.DrawFn) -> tuple[int, int, bool]:
    """(recorded length, length of the stored file, has checksum): a block that lost its checksum
    to a truncate may be shorter on record than on disk."""
    stored = draw(st.integers(0, 20 * CHUNK))
    has_checksum = draw(st.booleans())
    recorded = stored if has_checksum else draw(st.integers(0, stored))
    return recorded, stored, has_checksum


@given(block=stored_blocks(), inner=st.integers(0, 24 * CHUNK), length=st.integers(0, 24 * CHUNK))
def test_what_arrives_is_verifiable_and_covers_the_wanted_bytes(block: tuple[int, int, bool], inner: int,
                                                                length: int) -> None:
    recorded, on_disk, has_checksum = block
    r = verifiable_range(recorded, has_checksum, inner, length, chunk=CHUNK)
    assert r.stored == min(length, max(0, recorded - inner))
    if r.stored == 0:
        assert r.length == r.minimum == 0
        return
    assert r.offset % CHUNK == 0 and r.offset <= inner < r.offset + CHUNK
    assert r.skip == inner - r.offset and r.minimum == r.skip + r.stored <= r.length
    assert r.length - r.minimum < CHUNK            # never more than one chunk beyond what is wanted
    # The worker clips the request at the stored file's end; every chunk that arrives must be
    # whole or end exactly at the stored end, where its digest is defined.
    arrived_end = min(r.offset + r.length, on_disk)
    assert arrived_end - r.offset >= r.minimum
    for start in range(r.offset, arrived_end, CHUNK):
        end = min(start + CHUNK, arrived_end)
        assert end - start == CHUNK or end == on_disk


@given(block=stored_blocks(), inner=st.integers(0, 24 * CHUNK), length=st.integers(1, 24 * CHUNK))
def test_direct_means_exactly_the_wanted_bytes(block: tuple[int, int, bool], inner: int, length: int) -> None:
    recorded, _on_disk, has_checksum = block
    r = verifiable_range(recorded, has_checksum, inner, length, chunk=CHUNK)
    if r.direct and r.stored:
        assert r.offset == inner and r.length == r.minimum == r.stored
    elif r.stored:
        assert r.skip > 0 or r.length > r.stored


def test_examples() -> None:
    mib = 1 << 20
    # an aligned whole chunk: direct
    r = verifiable_range(4 * mib, True, mib, mib)
    assert (r.offset, r.length, r.minimum, r.direct) == (mib, mib, mib, True)
    # a tail with its checksum: up to the recorded end
    r = verifiable_range(mib + 10, True, mib, 100)
    assert (r.offset, r.length, r.minimum, r.stored, r.direct) == (mib, 10, 10, 10, True)
    # an unaligned start: from the chunk's start, the caller skips what it did not want
    r = verifiable_range(4 * mib, True, mib + 5, 10)
    assert (r.offset, r.length, r.minimum, r.skip, r.direct) == (mib, mib, 15, 5, False)
    # a truncated tail (no checksum): a whole chunk is asked, the worker clips it
    r = verifiable_range(mib + 10, False, mib, 10)
    assert (r.offset, r.length, r.minimum, r.direct) == (mib, mib, 10, False)
    # entirely past the recorded end: nothing to ask
    assert verifiable_range(10, True, 20, 5).stored == 0


def test_bad_input_is_refused() -> None:
    for args in ((-1, True, 0, 1), (10, True, -1, 1), (10, True, 0, -1)):
        with pytest.raises(InvalidArgument):
            verifiable_range(*args)
    with pytest.raises(InvalidArgument):
        verifiable_range(10, True, 0, 1, chunk=0)
    for size, block_size in ((-1, 10), (5, 0)):
        with pytest.raises(InvalidArgument):
            truncate_map(size, block_size)


@given(size=st.integers(0, 10**9), block_size=st.integers(1, 10**7), data=st.data())
def test_truncate_keeps_exactly_the_bytes_below_the_size(size: int, block_size: int, data: st.DataObject) -> None:
    plan = truncate_map(size, block_size)
    index = data.draw(st.integers(0, size // block_size + 3))
    length = data.draw(st.integers(0, block_size))
    after = plan.length_after(index, length)
    start = index * block_size
    if start >= size:
        assert after is None and index >= plan.first_dropped
    else:
        assert after == min(length, size - start)
    assert plan.first_dropped * block_size >= size > (plan.first_dropped - 1) * block_size or size == 0
    assert plan.tail_index * block_size + plan.tail_length == size


def test_truncate_examples() -> None:
    plan = truncate_map(25, 10)
    assert [plan.length_after(i, 10) for i in range(4)] == [10, 10, 5, None]
    assert plan.length_after(2, 3) == 3                # a short tail block stays as it is
    plan = truncate_map(20, 10)
    assert [plan.length_after(i, 10) for i in range(3)] == [10, 10, None] and plan.tail_length == 0
    assert truncate_map(0, 10).length_after(0, 7) is None
