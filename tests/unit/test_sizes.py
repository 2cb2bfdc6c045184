"""Sizes mean what they say (issue 27): GB is 10^9 bytes, GiB 2^30, through the parser and the
worker's --data-dir DIR:CAPACITY spelling."""
from __future__ import annotations

import pytest

from curvine_py import config
from curvine_py.core.errors import InvalidArgument


@pytest.mark.parametrize(("text", "expected"), [
    ("2GB", 2 * 10**9), ("2GiB", 2 << 30), ("2gb", 2 * 10**9), ("2 GiB", 2 << 30),
    ("1.5TB", 1_500_000_000_000), ("1TiB", 1 << 40), ("3MB", 3_000_000), ("3MiB", 3 << 20),
    ("4KB", 4000), ("4KiB", 4096), ("4096", 4096), ("4096B", 4096),
    ("64M", 64 << 20), ("2G", 2 << 30), ("1T", 1 << 40), ("8K", 8192),   # bare letters: binary
    ("0", 0),
])
def test_units_as_written(text: str, expected: int) -> None:
    assert config.parse_size(text) == expected


def test_data_dir_capacity_uses_the_same_units() -> None:
    assert config.parse_data_dir("/nvme0/curvine:2GB") == ("/nvme0/curvine", 2 * 10**9)
    assert config.parse_data_dir("/nvme0/curvine:2GiB") == ("/nvme0/curvine", 2 << 30)


@pytest.mark.parametrize("text", ["lots", "2XB", "-1GB", "nan", "inf", "GB", "2GiBs"])
def test_bad_sizes_are_refused_with_the_units(text: str) -> None:
    with pytest.raises(InvalidArgument, match="bad size"):
        config.parse_size(text)
