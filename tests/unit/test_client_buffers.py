"""client/buffers.py: zero-filling views in place, and which caller buffers are accepted."""
from __future__ import annotations

import array
import mmap

import pytest

from curvine_py.client.buffers import aligned, writable_view, zero
from curvine_py.core.errors import InvalidArgument


def test_zero_fills_exactly_the_view_in_the_callers_memory() -> None:
    data = bytearray(b"x" * 10)
    zero(memoryview(data)[3:7])
    assert data == b"xxx\0\0\0\0xxx"
    page = aligned(8192)
    page[:] = b"\xff" * 8192
    zero(page[4096:])
    assert bytes(page[:4096]) == b"\xff" * 4096 and bytes(page[4096:]) == bytes(4096)
    region = mmap.mmap(-1, 4096)
    region.write(b"y" * 4096)
    zero(writable_view(region)[100:])
    assert region[:100] == b"y" * 100 and region[100:] == bytes(3996)


def test_zero_of_an_empty_view_changes_nothing() -> None:
    data = bytearray(b"abc")
    zero(memoryview(data)[3:])
    zero(memoryview(data)[2:1])
    assert data == b"abc"


def test_zero_refuses_read_only_memory() -> None:
    with pytest.raises(TypeError):
        zero(memoryview(b"abc"))


def test_writable_view_flattens_and_refuses_what_it_cannot_receive_into() -> None:
    view = writable_view(array.array("I", [1, 2]))
    assert view.format == "B" and len(view) == 8
    with pytest.raises(InvalidArgument, match="read-only"):
        writable_view(b"abc")
    with pytest.raises(InvalidArgument, match="not contiguous"):
        writable_view(memoryview(bytearray(8))[::2])
    with pytest.raises(InvalidArgument, match="not a writable buffer"):
        writable_view(object())
