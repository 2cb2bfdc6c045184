"""Shared fixtures: real clusters on loopback (tests/harness.py)."""
from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.harness import Cluster

os.environ.setdefault("PYTHONHASHSEED", "0")
# The machine is shared and noisy: property tests check behaviour, never timing.
settings.register_profile("curvine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("curvine")


@pytest.fixture
def cluster3(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """1 master + 3 workers."""
    with Cluster(tmp_path, workers=3) as cluster:
        yield cluster


@pytest.fixture
def cluster1(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=1) as cluster:
        yield cluster
