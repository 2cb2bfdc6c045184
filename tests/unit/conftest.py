"""Fixtures shared by the master's store tests: a fake clock, the metadata engine (SQLite and
PostgreSQL: the store modules run every test on both, through `meta_engine`) and a store checked by
fsck after every test (s3ql's rule: every scenario ends with a consistency check that must find
nothing)."""
from __future__ import annotations

import itertools
import os
import pathlib
from collections.abc import Iterator

import psycopg
import pytest

from curvine_py.master.namespace import Namespace
from tests import pgserver
from tests.unit.test_master_support import Engine, FakeClock, open_store

_names = itertools.count(1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()



@pytest.fixture(params=["sqlite", "postgresql"])
def meta_engine(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """The engine of this test's stores: a fresh PostgreSQL database per test directory (dropped
    afterwards), or SQLite files."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    server: pgserver.PgServer = request.getfixturevalue("pg")
    admin = psycopg.connect(server.url("postgres", create=False), autocommit=True)
    made: dict[pathlib.Path, str] = {}

    def url_of(path: pathlib.Path) -> str:
        if path not in made:
            name = f"t{os.getpid()}_{next(_names)}"
            admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[call-overload]
            made[path] = server.url(name, create=False)
        return made[path]

    Engine.pg_url = url_of
    try:
        yield "postgresql"
    finally:
        Engine.pg_url = None
        for url in made.values():
            admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')  # type: ignore[call-overload]
        admin.close()


@pytest.fixture
def ns(meta_engine: str, tmp_path: pathlib.Path, clock: FakeClock) -> Iterator[Namespace]:
    store = open_store(tmp_path, clock)
    yield store
    assert store.check() == []
    store.close()
