"""Shared fixtures: real clusters on loopback (tests/harness.py)."""
from __future__ import annotations

import os
import pathlib
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests import pgserver
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


@pytest.fixture(scope="session")
def pg() -> Iterator[pgserver.PgServer]:
    """One throwaway PostgreSQL cluster per test process (tests/pgserver.py); each test makes its
    own database with `pg.url(NAME)`. CURVINE_REQUIRE_POSTGRES=1 (CI) turns 'cannot run here' into
    a failure with the reason instead of a skip."""
    reason = pgserver.available()
    if reason:
        if os.environ.get("CURVINE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required (CURVINE_REQUIRE_POSTGRES=1) but cannot run: {reason}")
        pytest.skip(reason)
    with pgserver.PgServer(pathlib.Path(tempfile.mkdtemp(prefix="curvine-pg-")) / "pg") as server:
        yield server
