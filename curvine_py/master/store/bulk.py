"""Whole-database access for dump and load (master/engine/transfer.py): the tables and their
columns, every row of one, the inode counter, emptying the store and inserting rows as they were.
Table names used in SQL here are the database's own (or checked against them by the caller).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from curvine_py.master.store.db import SQLITE, Database
from curvine_py.master.types import ROOT_INO

log = logging.getLogger(__name__)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Bulk(Database):
    """Bulk reads and writes of every table (call inside a snapshot() or transaction())."""

    def table_columns(self) -> list[tuple[str, tuple[str, ...]]]:
        if self.dialect == SQLITE:
            names = [str(row[0]) for row in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            return [(name, tuple(str(col[1]) for col in self._db.execute(f"PRAGMA table_info({_quoted(name)})")))
                    for name in names]
        columns: dict[str, list[str]] = {}
        for table, column in self._db.execute(
                "SELECT c.table_name, c.column_name FROM information_schema.columns c "
                "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
                "WHERE t.table_schema = current_schema() AND t.table_type = 'BASE TABLE' "
                "ORDER BY c.table_name, c.ordinal_position"):
            columns.setdefault(str(table), []).append(str(column))
        return [(table, tuple(cols)) for table, cols in sorted(columns.items())]

    def table_size(self, table: str) -> int:
        return int(self._db.execute(f"SELECT COUNT(*) FROM {_quoted(table)}").fetchone()[0])

    def table_rows(self, table: str, columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        cols = ", ".join(_quoted(c) for c in columns)
        yield from self._db.execute(f"SELECT {cols} FROM {_quoted(table)}")

    def next_ino(self) -> int:
        """The inode number the next create gets (AUTOINCREMENT, or PostgreSQL's identity sequence:
        never one that existed)."""
        if self.dialect == SQLITE:
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='inodes'").fetchone()
            used = int(row[0]) if row is not None else 0
        else:
            sequence = self._db.execute("SELECT pg_get_serial_sequence('inodes', 'ino')").fetchone()[0]
            last, called = self._db.execute(f"SELECT last_value, is_called FROM {sequence}").fetchone()
            used = int(last) if called else int(last) - 1
        top = self._db.execute("SELECT COALESCE(MAX(ino), 0) FROM inodes").fetchone()[0]
        return max(used, int(top)) + 1

    def set_next_ino(self, next_ino: int) -> None:
        if self.dialect == SQLITE:
            self._db.execute("DELETE FROM sqlite_sequence WHERE name='inodes'")
            self._db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('inodes', ?)", (next_ino - 1,))
        else:   # setval(.., n, true): the next value is n + 1; a sequence cannot stand below 1
            self._db.execute("SELECT setval(pg_get_serial_sequence('inodes', 'ino'), ?, ?)",
                             (max(1, next_ino - 1), next_ino > 1))

    def is_blank(self) -> bool:
        """Nothing but what a new store starts with: the root inode and the meta keys."""
        for table, _ in self.table_columns():
            if table == "meta":
                continue
            if table == "inodes":
                if self._db.execute("SELECT 1 FROM inodes WHERE ino != ? LIMIT 1", (ROOT_INO,)).fetchone():
                    return False
            elif self._db.execute(f"SELECT 1 FROM {_quoted(table)} LIMIT 1").fetchone():
                return False
        return True

    def clear_all(self) -> None:
        self._quota_free = False
        self._cluster_id = None       # the load brings its own
        for table, _ in self.table_columns():
            self._db.execute(f"DELETE FROM {_quoted(table)}")
        if self.dialect == SQLITE:
            self._db.execute("DELETE FROM sqlite_sequence")

    def loaded(self) -> None:
        """After a load (in its transaction): no worker row is kept. A dump's worker addresses are
        not trusted: a row loaded live is in the placement view at once, and a crafted one sent
        clients (and the cluster token) to a stranger's listener; even a row not live is still
        tried for the blocks it is listed with. Each worker registers again with the address it
        really has (at its next heartbeat it is told to) under its persisted id, so its block
        locations count again. PostgreSQL then plans by table statistics, and a COPY leaves none
        until autovacuum gets to it (SQLite plans by its indexes alone)."""
        self._db.execute("DELETE FROM workers")
        if self.dialect != SQLITE:
            self._db.execute("ANALYZE")

    def settled_after_load(self) -> None:
        """After a load committed (PostgreSQL): VACUUM, so the rows a COPY left without hint bits
        and without a visibility map are set now, not by the first reads of a serving master (each
        first read of a page dirties it) and not by the insert-triggered autovacuum pass over every
        table that would otherwise start within a minute of the master (docs/metadata.md). Outside
        any transaction (VACUUM cannot run in one): a failure here loses nothing, it is logged."""
        if self.dialect == SQLITE:
            return
        try:
            self._db.execute("VACUUM")
        except Exception as exc:  # noqa: BLE001 - the load is committed; autovacuum will get there
            log.warning("VACUUM after the load failed (autovacuum will do it): %s", exc)

    def insert_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        self._quota_free = False
        self._cluster_id = None
        if self.dialect != SQLITE:
            self._db.copy_rows(table, columns, rows)
            return
        cols = ", ".join(_quoted(c) for c in columns)
        marks = ", ".join("?" for _ in columns)
        self._db.executemany(f"INSERT INTO {_quoted(table)} ({cols}) VALUES ({marks})", rows)
