"""Fixtures shared by the master's store tests: a fake clock and a store checked by fsck after
every test (s3ql's rule: every scenario ends with a consistency check that must find nothing)."""
from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.master.namespace import Namespace
from tests.unit.test_master_support import FakeClock, open_store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ns(tmp_path: pathlib.Path, clock: FakeClock) -> Iterator[Namespace]:
    store = open_store(tmp_path, clock)
    yield store
    assert store.check() == []
    store.close()
