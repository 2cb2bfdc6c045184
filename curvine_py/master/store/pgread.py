"""The PostgreSQL engine's readers: a handler thread's reads on the shared pool of read-only sessions
(pgengine.PgEngine.reader). A statement borrows a session for itself; a snapshot keeps one, in
REPEATABLE READ READ ONLY, so every read sees committed state only: exactly what was acknowledged.
A session that died while idle (a server restart) is replaced once; otherwise a broken one
surfaces as `Unavailable` (pgconn.lost).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from curvine_py.core.errors import CurvineError
from curvine_py.master.store.pgconn import READ_TIMEOUT_S, Rows, fetched, lost, run_statement, translate


class PgReader:
    """A handler thread's reads on the shared reader pool: a statement borrows a connection for
    itself; a snapshot (BEGIN .. COMMIT, see Database.snapshot) keeps one, in REPEATABLE READ READ
    ONLY, so its statements see one committed state. One PgReader per thread, as the SQLite reader."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._pinned: psycopg.Connection[Any] | None = None
        self._begun = False               # BEGIN sent on the pinned connection (it waits for the first read)
        self.single = False               # as PgWriter's (a reader's transactions are read-only anyway)
        self.deferring = False

    def can_defer(self) -> bool:
        return False

    @property
    def in_transaction(self) -> bool:
        return self._pinned is not None

    def _borrow(self) -> psycopg.Connection[Any]:
        try:
            conn: psycopg.Connection[Any] = self._pool.getconn(timeout=READ_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - PoolTimeout, or the pool's connect failing
            raise lost(exc) from None
        return conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        if sql.startswith("BEGIN"):     # a snapshot (or a write attempt, which the server refuses)
            self._pinned, self._begun = self._borrow(), False
            return Rows([], -1)
        if sql in ("COMMIT", "ROLLBACK"):
            if self._pinned is None:
                return Rows([], -1)
            conn, self._pinned = self._pinned, None
            try:
                if self._begun:
                    conn.execute(sql)
            except psycopg.Error:
                pass           # a read-only snapshot: nothing to lose; the pool drops a broken one
            finally:
                self._pool.putconn(conn)
            return Rows([], -1)
        if self._pinned is not None and self._begun:
            return self._guarded(self._pinned, sql, params)
        # The first statement of a snapshot (sent with its BEGIN: one round trip), or one alone.
        # A pooled session that died while idle (a server restart) is replaced once: nothing has
        # been read on it yet, so nothing is lost by asking again on another.
        for attempt in (0, 1):
            snapshot = self._pinned is not None
            conn = self._pinned if self._pinned is not None else self._borrow()
            try:
                rows = self._first(conn, sql, params, snapshot=snapshot)
            except psycopg.Error as exc:
                broken = conn.broken or conn.closed
                if not broken:
                    if snapshot:
                        self._begun = True        # its ROLLBACK ends the failed transaction
                    else:
                        self._pool.putconn(conn)
                    raise
                self._pool.putconn(conn)          # the pool drops a broken session
                self._pinned = None
                if attempt:
                    raise lost(exc) from None
                if snapshot:
                    self._pinned = self._borrow()
                continue
            if snapshot:
                self._begun = True
            else:
                self._pool.putconn(conn)
            return rows
        raise AssertionError("unreachable")

    def alone(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """A statement that is the whole of its read (one statement is consistent by itself): as the
        first of a snapshot it runs without the snapshot's BEGIN, so neither BEGIN nor COMMIT costs
        a round trip. Statements after it in the same snapshot begin one of their own, so the caller
        must not combine its answer with theirs (pgfast.walk drops it when it answers None)."""
        if self._pinned is None or self._begun:
            return self.execute(sql, params)
        for attempt in (0, 1):
            conn = self._pinned
            try:
                return run_statement(conn, sql, params)
            except psycopg.Error as exc:
                if not (conn.broken or conn.closed):
                    raise
                self._pool.putconn(conn)          # the pool drops a broken session
                self._pinned = None
                if attempt:
                    raise lost(exc) from None
                self._pinned = self._borrow()
        raise AssertionError("unreachable")

    @staticmethod
    def _first(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any], *, snapshot: bool) -> Rows:
        if not snapshot:
            return run_statement(conn, sql, params)
        with conn.pipeline():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursor = conn.execute(translate(sql), params or None)
        return fetched(cursor)

    @staticmethod
    def _guarded(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any]) -> Rows:
        try:
            return run_statement(conn, sql, params)
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise lost(exc) from None
            raise

    def whole(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        return self.execute(sql, params)          # a write: the server refuses it (read only)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Rows:
        raise CurvineError("a reader does not write")

    def close(self) -> None:
        if self._pinned is not None:
            self._pool.putconn(self._pinned)
            self._pinned = None
