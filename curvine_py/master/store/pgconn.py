"""The sqlite3.Connection subset the store uses, on psycopg 3 (the PostgreSQL engine's connections).

The store classes run their SQL on `self._db` with `?` placeholders, `execute`/`executemany`,
`fetchone`/`fetchall`/`rowcount`/iteration and `in_transaction`. Their SQL is written in the
common subset of both engines (ON CONFLICT upserts, RETURNING, CASE instead of boolean sums, CAST
(.. AS BIGINT)); what is left differs in spelling only and is translated here once per statement
text (cached): `?` -> `%s` (and a literal `%` -> `%%`), `BEGIN IMMEDIATE` -> `BEGIN`,
`group_concat(x)` -> `string_agg(x, ',')`.

A broken connection (the server restarted, the network cut) surfaces as `Unavailable`, never as a
psycopg error: the caller's RPC fails within its deadline and is retried. The writer reconnects
(and re-takes leadership, see pgengine.py) before the next transaction begins.

A group-commit batch may leave its COMMIT in flight (`Database.batch(then=...)`, storethread.py):
the next batch's statements are sent behind it, so they travel while the server fsyncs, and the
batch before is told its outcome (`then`) once its COMMIT's answer is in, before anything of the
next one is read or committed (PgWriter.settle).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import re
import select
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import pq

from curvine_py.core.errors import CurvineError, Unavailable

log = logging.getLogger(__name__)

_GROUP_CONCAT = re.compile(r"\bgroup_concat\(([^()]*)\)", re.IGNORECASE)
_BUSY = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR, pq.TransactionStatus.ACTIVE)
T = TypeVar("T")
IDLE_CHECK_S = 1.0               # a writer idle this long sends BEGIN alone first (a dead session is retried)
READ_TIMEOUT_S = 1.5             # a pooled reader is waited for this long, twice at most: under a 5 s client deadline


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """The statement in PostgreSQL's spelling. Our SQL holds no `?` or `%` inside string literals."""
    text = sql.replace("%", "%%").replace("?", "%s")
    if text.lstrip().upper().startswith("BEGIN IMMEDIATE"):
        return "BEGIN"
    return _GROUP_CONCAT.sub(r"string_agg(\1, ',')", text)


def lost(exc: BaseException) -> CurvineError:
    return Unavailable(f"the metadata database connection failed: {str(exc).strip() or type(exc).__name__}")


class Rows:
    """A result already fetched (a statement whose pooled connection went back at once)."""

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int, status: str | None = None) -> None:
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount
        self.status = status            # the server's command tag ("COMMIT", "ROLLBACK", "INSERT 0 1" ...)

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        rest, self._next = self._rows[self._next:], len(self._rows)
        return rest

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())


def _answered_rows(cursor: psycopg.Cursor[Any]) -> bool:
    """The statement answered rows (a SELECT, a RETURNING), as `cursor.description is not None`
    says, without building the description: psycopg makes a Column object per column there, a third
    of the store thread's CPU in a create (bench/meta_profile.py)."""
    result = cursor.pgresult
    return result is not None and (result.nfields > 0 or result.status == pq.ExecStatus.TUPLES_OK)


def fetched(cursor: psycopg.Cursor[Any]) -> Rows:
    """A statement's answer, fetched: its rows (if it answers rows), row count and command tag."""
    rows = cursor.fetchall() if _answered_rows(cursor) else []
    return Rows(rows, cursor.rowcount, cursor.statusmessage)


def run_statement(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any]) -> Rows:
    """One statement outside any pipeline, its answer fetched (the writer's and the readers')."""
    return fetched(conn.execute(translate(sql), params or None))


class _Pending:
    """The result of a statement sent in pipeline mode: fetched when first looked at."""

    def __init__(self, cursor: psycopg.Cursor[Any], writer: PgWriter) -> None:
        self._cursor = cursor
        self._writer = writer

    @property
    def rowcount(self) -> int:
        self._writer.settle()
        self._writer.sync()
        return self._cursor.rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        self._writer.settle()             # a read never takes in a later batch's answers unsettled
        return self._writer.guard(self._cursor.fetchone)

    def fetchall(self) -> list[tuple[Any, ...]]:
        self._writer.settle()
        return self._writer.guard(self._cursor.fetchall)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())


class _InFlight:
    """A batch's COMMIT sent and not yet answered, and whom to tell how it ended."""

    __slots__ = ("commit", "then")

    def __init__(self, commit: psycopg.Cursor[Any], then: Callable[[CurvineError | None], None]) -> None:
        self.commit = commit
        self.then = then


class PgWriter:
    """The master's one writer session. `ensure` (pgengine.py) reconnects and re-checks leadership;
    it runs before a transaction begins, so nothing is ever written on a session that does not
    hold the leader lock.

    Inside a transaction the session is in pipeline mode: a statement is sent at once and its
    result waited for only when the store looks at it, so the statements whose results nobody reads
    (SAVEPOINT, most INSERTs, UPDATEs and DELETEs) travel with the next one that is read. The
    errors of a call are all in before its savepoint is released (RELEASE waits for every result),
    so a failing statement fails its own call: ROLLBACK TO first drains what is still in flight.

    Overlap (`then`, set by Database.batch for the store thread): COMMIT is sent and not waited
    for; the batch is durable when its answer says COMMIT, and `then(None)` says so (`then(error)`
    otherwise), never earlier. The next batch begins in the same pipeline: the one-statement calls
    it defers (`defer`) are sent at once, behind the COMMIT; anything else it sends (a statement
    whose answer its call reads, a SAVEPOINT, its own COMMIT) first settles the batch before. No
    Sync separates the two, so a batch whose statement fails on the server takes the batch sent
    behind it down too: both fail, none is acknowledged. A session that breaks with a COMMIT in
    flight fails that batch (Unavailable) unless its answer had arrived, and the next one too."""

    def __init__(self, conn: psycopg.Connection[Any], ensure: Callable[[], psycopg.Connection[Any]]) -> None:
        self.conn = conn
        self._ensure = ensure
        self._pipeline: psycopg.Pipeline | None = None
        self._manager: contextlib.AbstractContextManager[psycopg.Pipeline] | None = None
        self._open = False                # a transaction is open (BEGIN asked for, COMMIT/ROLLBACK not yet)
        self._lazy = False                # ... and its BEGIN is not sent yet (it travels with the first statement)
        self.single = False               # ... and it holds one call at most (Database.batch, pgfast.py)
        self.deferring = False            # ... and its caller reads answers after COMMIT (pgfast.Deferred)
        self._savepoints = 0              # SAVEPOINTs open in it
        self._idle_since = 0.0            # monotonic time the last transaction ended
        self.then: Callable[[CurvineError | None], None] | None = None   # the next BEGIN's batch may overlap
        self._then: Callable[[CurvineError | None], None] | None = None  # ... and the open one does
        self._inflight: _InFlight | None = None   # the batch before: its COMMIT not answered yet
        self._doomed: CurvineError | None = None  # the open batch shares a pipeline with a failed one
        self.overlapped = 0               # batches begun with the COMMIT before them in flight

    @property
    def in_transaction(self) -> bool:
        # True until COMMIT/ROLLBACK even when the session broke inside: the calls after the break
        # then fail on the dead session (Unavailable), never in a new transaction on a reconnected
        # one whose COMMIT would acknowledge the lost work of the calls before the break.
        return self._open

    def guard(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except psycopg.Error as exc:
            if self.conn.broken or self.conn.closed:
                self._drop_pipeline()
                raise lost(exc) from None
            raise

    def sync(self) -> None:
        """Waits for every statement in flight; raises the first one's error."""
        if self._pipeline is not None:
            self.guard(self._pipeline.sync)

    def _drop_pipeline(self) -> None:
        manager, self._manager, self._pipeline = self._manager, None, None
        if manager is not None:
            with contextlib.suppress(Exception):
                manager.__exit__(None, None, None)

    def _leave_pipeline(self) -> None:
        manager, self._manager, self._pipeline = self._manager, None, None
        if manager is not None:
            self.guard(lambda: manager.__exit__(None, None, None))

    def _enter_pipeline(self) -> None:
        manager = self.conn.pipeline()
        self._pipeline = self.guard(manager.__enter__)
        self._manager = manager

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows | _Pending:
        if sql.startswith("BEGIN"):
            self._begin(sql)
            return Rows([], -1)
        if sql in ("COMMIT", "ROLLBACK"):
            self._end(sql)
            return Rows([], -1)
        self.settle()                     # its answer may be read: the batch before is settled first
        if self._doomed is not None:
            raise self._doomed
        if self._lazy:
            self._start()
        if sql.startswith("ROLLBACK TO") and self._pipeline is not None:
            # Whatever is still in flight belongs to the failed call: drain it, errors and all.
            with contextlib.suppress(psycopg.Error):
                self.sync()
        if self._pipeline is None:
            return self.guard(lambda: run_statement(self.conn, sql, params))
        cursor = self.guard(lambda: self.conn.execute(translate(sql), params or None))
        if sql.startswith("SAVEPOINT"):
            self._savepoints += 1
        elif sql.startswith("RELEASE"):
            self._savepoints -= 1
            self.sync()                   # the call's errors, before it counts as done
        return _Pending(cursor, self)

    def can_defer(self) -> bool:
        """A one-statement call may leave its answer unread until the batch's COMMIT: the batch's
        caller resolves it (storethread.py), and no SAVEPOINT is open whose caller would want its
        error now (CreateMany's creates)."""
        return self._open and self.deferring and not self.single and self._savepoints == 0

    def defer(self, sql: str, params: Sequence[Any]) -> _Pending:
        """A statement of a call that can_defer, sent without waiting: with the COMMIT of the batch
        before still in flight, it travels behind it (no settle)."""
        if self._doomed is not None:
            raise self._doomed
        if self._lazy:
            self._start()
        return _Pending(self._send(translate(sql), params), self)

    def _send(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """Sends a statement in the pipeline. Sending also takes in the answers that arrived, and
        psycopg raises the first failed one here: with a COMMIT in flight that is an answer of the
        batch before or of an earlier statement of this one, whose COMMIT tells (settle, _end)."""
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql, params or None)
        except psycopg.Error as exc:
            if self.conn.broken or self.conn.closed:
                self.settle()
                self._drop_pipeline()
                raise lost(exc) from None
            if self._inflight is None:
                raise
        if self._inflight is not None and self._answered(self._inflight):
            self.settle()                 # its answer came in with this send: the batch before is told now
        return cursor

    def settle(self) -> None:
        """Waits for the COMMIT left in flight, if any, and tells its batch how it ended: durable
        only if the server answered COMMIT. Called before anything of a later batch is read or
        committed, so the batches are acknowledged in order and no call reads across them."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        # The batch is told in every case: also when waiting for or reading its outcome fails
        # unexpectedly, then as failed (it may have committed, but nothing is acknowledged that is
        # not known durable). A batch never told would keep the store thread settling it forever.
        outcome: CurvineError | None = CurvineError("metadata commit failed: its outcome could not be read")
        try:
            outcome = self._outcome(inflight)
        finally:
            inflight.then(outcome)

    def _outcome(self, inflight: _InFlight) -> CurvineError | None:
        """How the batch of `inflight` ended (None: durable), waiting for its COMMIT's answer."""
        started = self._open and not self._lazy          # the next batch's statements share the pipeline
        failure: BaseException | None = None
        if not self._answered(inflight):                 # not in yet: wait for it
            try:
                if not (started and self._pipeline is not None):
                    self._leave_pipeline()
                elif not self._await(inflight):
                    self._pipeline.sync()                # ... and for what went behind it
            except (psycopg.Error, CurvineError, OSError) as exc:   # OSError: the wait's select()
                failure = exc
        self._idle_since = time.monotonic()
        answer = inflight.commit.pgresult
        if answer is not None and answer.status == pq.ExecStatus.COMMAND_OK \
                and inflight.commit.statusmessage == "COMMIT":
            return None
        if self.conn.broken or self.conn.closed:
            self._drop_pipeline()
            return failure if isinstance(failure, CurvineError) else lost(failure or Exception("closed"))
        said = str(inflight.commit.statusmessage if answer is not None else failure or "no answer")
        if started:
            # What was sent behind it ran in the same failed pipeline: this batch fails too.
            self._doomed = CurvineError("metadata commit failed: the batch before this one failed")
        elif self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")
        return CurvineError(f"metadata commit failed: the server did not commit the batch "
                            f"({' '.join(said.split())})")

    def _answered(self, inflight: _InFlight) -> bool:
        """The COMMIT's answer is in: a result, or an error psycopg took in (and raised) already."""
        if inflight.commit.pgresult is not None:
            return True
        queue = getattr(self._pipeline, "result_queue", None)
        return queue is not None and not any(item is not None and item[0] is inflight.commit for item in queue)

    def _await(self, inflight: _InFlight) -> bool:
        """Takes in answers as they arrive until the COMMIT's is in (True), without waiting for the
        statements sent behind it: psycopg's public sync() waits for every one. False when this
        psycopg has no such step (its pipeline internals changed): then the caller syncs."""
        pipeline = self._pipeline
        take_in = getattr(pipeline, "_communicate_gen", None)
        if pipeline is None or take_in is None or getattr(pipeline, "result_queue", None) is None:
            return False
        while not self._answered(inflight):
            select.select([self.conn.fileno()], [], [], 1.0)
            try:
                self.conn.wait(take_in())     # reads what arrived (raises a failed answer's error)
            except psycopg.Error:
                with contextlib.suppress(psycopg.Error):
                    pipeline.sync()           # the rest, so the session's state is known (broken?)
                raise
            if self.conn.broken or self.conn.closed:
                return True
        return True

    def _begin(self, sql: str) -> None:
        then, self.then = self.then, None
        if self._inflight is not None and (then is None or self.conn.broken or self.conn.closed
                                           or self._answered(self._inflight)):
            self.settle()                 # a transaction that does not overlap waits for the one before
        if self._inflight is not None:
            # The COMMIT before is in flight: this batch goes behind it in the same pipeline, its
            # BEGIN with its first statement (the session was alive when that COMMIT was sent).
            self.overlapped += 1
            self._open = self._lazy = True
            self._then = then
            return
        if self._pipeline is not None:    # left by a batch whose COMMIT answered early (settle)
            if self.conn.broken or self.conn.closed:
                self._drop_pipeline()
            elif time.monotonic() - self._idle_since < IDLE_CHECK_S:
                self._then = then         # busy: BEGIN goes with the first statement, in this pipeline
                self._open = self._lazy = True
                return
            else:
                with contextlib.suppress(CurvineError):
                    self._leave_pipeline()
        self.conn = self._ensure()
        self._then = then
        if time.monotonic() - self._idle_since < IDLE_CHECK_S and not self._server_spoke():
            # Busy and nothing heard: BEGIN waits for the first statement and travels with it (no
            # round trip of its own; none at all for a batch that runs no SQL). A session that
            # breaks right now fails the batch (Unavailable).
            self._open = self._lazy = True
            return
        try:
            self._begin_alone(sql)
            self._enter_pipeline()
        except BaseException:
            self._drop_pipeline()         # no transaction is open: the next BEGIN reconnects
            self._then = None
            raise
        self._open = True

    def _start(self) -> None:
        """Sends the BEGIN of a lazy transaction (before its first statement)."""
        self._lazy = False
        if self._pipeline is None:
            self._enter_pipeline()
        self._send("BEGIN")

    def whole(self, sql: str, params: Sequence[Any] = ()) -> Rows | _Pending:
        """A statement that is a whole call by itself, all or nothing (a server-side function,
        pgfast.py). When it is all the work of its transaction (`single`, and nothing sent yet) it
        runs without BEGIN: the server commits it before it answers, one round trip in all, and the
        transaction's COMMIT then has nothing to send."""
        if self._open and self._lazy and self.single and self._pipeline is None:
            return self.guard(lambda: run_statement(self.conn, sql, params))
        return self.execute(sql, params)

    def _server_spoke(self) -> bool:
        """Something arrived on the idle session: a server that ends a session (a restart, a
        killed backend) says so, then closes the socket. Then BEGIN goes alone, and a dead session
        is replaced before anything is written on it."""
        try:
            readable, _, _ = select.select([self.conn.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return True
        return bool(readable)

    def _begin_alone(self, sql: str) -> None:
        try:
            run_statement(self.conn, sql, ())
        except psycopg.Error:
            if not (self.conn.broken or self.conn.closed):
                raise
            # The session died while idle (a server restart): nothing was written on it, so
            # reconnecting (and re-taking the lock) once before this transaction is safe.
            self.conn = self._ensure()
            self.guard(lambda: run_statement(self.conn, sql, ()))

    def _end(self, sql: str) -> None:
        then, self._then = self._then, None
        try:
            self.settle()                 # the batch before is answered (and told) before this one ends
            if self._doomed is not None and sql == "COMMIT":
                raise self._doomed
            if self._lazy:                # nothing was sent: nothing to end
                if sql == "COMMIT" and then is not None:
                    then(None)
                return
            if sql == "ROLLBACK" and (self.conn.broken or self.conn.closed):
                self._drop_pipeline()     # the server has rolled it back already
                return
            if self._pipeline is None:
                ended = self.guard(lambda: run_statement(self.conn, sql, ()))
                status = ended.status
            elif sql == "COMMIT" and then is not None:
                # Left in flight: `then` hears of it once the answer is in (settle).
                self._inflight = _InFlight(self._send(sql), then)
                # A Flush: the server sends the COMMIT's answer once it is durable, not only when
                # asked for it later, so a statement sent behind it takes it in (_send).
                with contextlib.suppress(psycopg.Error):
                    self.conn.pgconn.send_flush_request()
                    self.conn.pgconn.flush()
                return
            else:
                if sql == "ROLLBACK":
                    with contextlib.suppress(psycopg.Error):
                        self.sync()
                cursor = self.guard(lambda: self.conn.execute(sql))
                self._leave_pipeline()    # waits for the COMMIT: no reply before it is durable
                status = cursor.statusmessage
            if sql == "COMMIT" and status != "COMMIT":
                # The server answers a COMMIT of an aborted transaction with ROLLBACK, not an error:
                # a call without a savepoint of its own failed on the server (pgfast.py).
                raise CurvineError(f"metadata commit failed: the server rolled the transaction back ({status})")
            if sql == "COMMIT" and then is not None:
                then(None)
        except BaseException as exc:
            self._drop_pipeline()
            if not (self.conn.closed or self.conn.broken) and \
                    self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    self.conn.execute("ROLLBACK")    # a COMMIT that failed leaves nothing open
            if isinstance(exc, psycopg.Error) and sql == "COMMIT":
                # In pipeline mode the COMMIT after a failed statement is not even sent (PipelineAborted).
                raise CurvineError(f"metadata commit failed: {' '.join(str(exc).split()) or type(exc).__name__}") \
                    from None
            raise
        finally:
            self._open = self._lazy = self.single = self.deferring = False
            self._savepoints = 0
            self._doomed = None
            self._idle_since = time.monotonic()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Rows:
        self.settle()
        if self._doomed is not None:
            raise self._doomed
        if self._lazy:
            self._start()

        def run() -> Rows:
            with self.conn.cursor() as cursor:
                cursor.executemany(translate(sql), rows)
                return Rows([], cursor.rowcount)
        return self.guard(run)

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """COPY .. FROM STDIN: a bulk insert an order of magnitude faster than executemany (COPY
        does not run in pipeline mode: the pipeline is left for it, inside the same transaction)."""
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
        quoted = '"' + table.replace('"', '""') + '"'
        self.settle()
        if self._doomed is not None:
            raise self._doomed
        if self._lazy:
            self._start()                 # COPY inside the transaction, never in autocommit
        in_pipeline = self._pipeline is not None
        self._leave_pipeline()

        def run() -> None:
            with self.conn.cursor() as cursor, cursor.copy(f"COPY {quoted} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        self.guard(run)
        if in_pipeline:
            self._enter_pipeline()

    def alone(self, sql: str, params: Sequence[Any] = ()) -> Rows | _Pending:
        """A read that is a whole answer by itself (PgReader.alone); on the writer, as execute."""
        return self.execute(sql, params)

    def close(self, *, last: tuple[str, tuple[Any, ...]] | None = None) -> None:
        """Ends the session; `last`: one statement run on it first, outside any pipeline (the
        engine gives its leader lock up this way: pgengine.py)."""
        with contextlib.suppress(CurvineError):
            self.settle()
        self._drop_pipeline()
        self._open = self._lazy = False
        if last is not None and not (self.conn.closed or self.conn.broken):
            try:
                # An aborted or open transaction would refuse (or hold back) the statement.
                self.conn.rollback()
                self.conn.execute(last[0], last[1])
            except psycopg.Error as exc:    # the session is going anyway
                log.warning("last statement before closing failed: %s", exc)
        self.conn.close()
