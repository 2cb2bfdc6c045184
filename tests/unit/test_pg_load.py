"""A load into PostgreSQL (master/engine/transfer.py) leaves the tables vacuumed and analyzed: the
planner has statistics for the rows a COPY brought, and the first reads of a serving master do not
set every page's hint bits nor wait for an insert-triggered autovacuum pass over every table."""
from __future__ import annotations

import io
import pathlib

import psycopg

from curvine_py.master.engine import transfer
from curvine_py.master.engine.dumpfile import DumpReader
from curvine_py.master.engine.open import open_namespace
from curvine_py.master.engine.url import parse_meta_url
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO
from tests import pgserver
from tests.unit.test_master_support import mkdir, mkfile


def test_a_load_ends_vacuumed_and_analyzed(pg: pgserver.PgServer, tmp_path: pathlib.Path) -> None:
    source = Namespace(str(tmp_path / "meta.db"))
    d = mkdir(source, "d")
    with source.batch():
        for i in range(2000):
            mkfile(source, f"f{i:05d}", d.ino)
    out = io.BytesIO()
    with source.snapshot():
        transfer.dump(source, out)
    source.close()
    url = pg.url("load_vacuumed")
    target = open_namespace(parse_meta_url(url))
    try:
        transfer.load(target, DumpReader(io.BytesIO(out.getvalue())), force=True)
        assert target.lookup(ROOT_INO, "d").ino == d.ino
    finally:
        target.close()
    with psycopg.connect(url, autocommit=True) as conn:
        # Vacuumed after the load's own ANALYZE, i.e. after it committed (VACUUM cannot run inside).
        rows = dict(conn.execute(
            "SELECT relname, last_vacuum >= last_analyze FROM pg_stat_user_tables "
            "WHERE relname IN ('inodes', 'dentries')").fetchall())
        tuples = dict(conn.execute("SELECT relname, reltuples FROM pg_class "
                                   "WHERE relname IN ('inodes', 'dentries')").fetchall())
    assert rows == {"inodes": True, "dentries": True}
    assert tuples["dentries"] >= 2000 and tuples["inodes"] >= 2000     # the planner knows the rows
