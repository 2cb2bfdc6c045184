"""The PostgreSQL metadata engine: one writer session that holds the leadership, a reader pool.

    ns = open_engine(url, advertise="10.0.0.5:8995", block_size=...)   # a Namespace; or NotLeader
    ns.engine.lost_leadership          # threading.Event, set when this master may no longer write
    ns.engine.on_lost_leadership(fn)   # fn() called once, on the thread that found out
    ns.set_leader_address("host:port") # through the store thread once the port is known

Isolation. A master has exactly one writer connection, and every mutation reaches it through the
store thread, one after the other (storethread.py: a batch is one transaction, each call a
SAVEPOINT inside it, no reply before COMMIT). No two transactions of this master ever run at the
same time, and no other master writes (the lock below), so READ COMMITTED on that one session is
serial by construction: nothing a transaction read can change under it, no serialization failure
can happen and nothing needs a retry. Readers (the handler threads' `Namespace.reader()`) take
connections from a pool and read in REPEATABLE READ READ ONLY snapshots: they see committed state
only, which is exactly what has been acknowledged.

Leadership fencing. Right after connecting, the writer session takes
`pg_try_advisory_lock(LEADER_KEY)` (a session lock: it lives exactly as long as that session).
Failing that, opening raises NotLeader carrying the address the leader wrote into `meta`
(`leader_address`). The leader bumps `meta.leader_term` when it takes over. When the writer
session breaks (PostgreSQL restarted, network cut), the lock is gone with it: the next transaction
first reconnects and takes the lock again, and goes on only if `leader_term` is still the one this
master wrote (nobody led in between, so what it holds in memory is still true). Otherwise, or when
another master holds the lock now, `lost_leadership` is set and every further write raises
NotLeader. The calls of the batch that met the broken session fail with Unavailable.

Credentials come from the MetaURL (password file, URL, or libpq's PGPASSWORD/PGPASSFILE) and are
never logged: messages carry `url.masked()`, and a connection error's text is libpq's (which never
repeats the password).
"""
from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from curvine_py.core.errors import CurvineError, NotLeader, Unavailable
from curvine_py.master.engine.url import MetaURL
from curvine_py.master.store.pgconn import PgWriter, lost
from curvine_py.master.store.pgread import PgReader

log = logging.getLogger(__name__)

# A fixed 64-bit key, the same for every master of every version: sha256("curvine-py master")[:8].
LEADER_KEY = int.from_bytes(hashlib.sha256(b"curvine-py master").digest()[:8], "big", signed=True)
CONNECT_TIMEOUT_S = 5            # an unreachable server fails the open (or a reconnect) this fast
READER_POOL_SIZE = 8             # connections shared by the handler threads' readers
# Dead peers are noticed by TCP, not only when PostgreSQL closes the session itself.
_TCP = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
        "tcp_user_timeout": 10_000}


def connect_kwargs(url: MetaURL, *, application: str = "curvine-py master") -> dict[str, Any]:
    kwargs: dict[str, Any] = {"host": url.host, "port": url.port, "dbname": url.database,
                              "connect_timeout": CONNECT_TIMEOUT_S, "application_name": application, **_TCP}
    if url.user:
        kwargs["user"] = url.user
    if url.password:
        kwargs["password"] = url.password
    kwargs.update(dict(url.params))
    return kwargs


def connect(url: MetaURL, *, application: str = "curvine-py master") -> psycopg.Connection[Any]:
    """An autocommit session (the store issues BEGIN/COMMIT itself), or a CurvineError saying why
    not, without the password."""
    try:
        return psycopg.connect(autocommit=True, **connect_kwargs(url, application=application))
    except psycopg.OperationalError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise Unavailable(f"cannot connect to the metadata database {url.masked()}: {reason}") from None


def _leader_address(conn: psycopg.Connection[Any]) -> str:
    if conn.execute("SELECT to_regclass('meta')").fetchone() == (None,):
        return ""
    row = conn.execute("SELECT value FROM meta WHERE key='leader_address'").fetchone()
    return str(row[0]) if row is not None else ""


def _meta_int(conn: psycopg.Connection[Any], key: str) -> int:
    if conn.execute("SELECT to_regclass('meta')").fetchone() == (None,):
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key=%s", (key,)).fetchone()
    return int(row[0]) if row is not None else 0


class PgEngine:
    """The sessions of one master (or one `meta load`) on one PostgreSQL database."""

    def __init__(self, url: MetaURL, *, advertise: str = "", lead: bool = True) -> None:
        self.url = url
        self.advertise = advertise
        self.lost_leadership = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._term = 0
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._pool_lock = threading.Lock()
        self.writer: PgWriter | None = None
        if lead:
            self.writer = PgWriter(self._lead(), self.ensure)
        else:
            connect(url, application="curvine-py reader").close()   # a clear error now, not a pool timeout

    # ------------------------------------------------------------------ leadership

    def _lead(self) -> psycopg.Connection[Any]:
        """A new writer session holding the leader lock, or NotLeader."""
        conn = connect(self.url)
        try:
            held = conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_KEY,)).fetchone()
            if held != (True,):
                leader = _leader_address(conn)
                raise NotLeader(leader, f"{self.url.masked()}: another master leads this metadata database"
                                        f"{f' (at {leader})' if leader else ''}")
        except psycopg.Error as exc:
            conn.close()
            raise lost(exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def claim(self) -> None:
        """Called once the schema exists: a new term begins, with this master's address."""
        assert self.writer is not None
        conn = self.writer.conn
        with conn.transaction():
            self._term = _meta_int(conn, "leader_term") + 1
            conn.execute("INSERT INTO meta (key, value) VALUES ('leader_term', %s) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(self._term),))
            if self.advertise:
                conn.execute("INSERT INTO meta (key, value) VALUES ('leader_address', %s) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (self.advertise,))
        log.info("leading the metadata database %s (term %d)", self.url.masked(), self._term)

    def on_lost_leadership(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self.lost_leadership.is_set():
            callback()

    def _lose(self, leader: str) -> NotLeader:
        if not self.lost_leadership.is_set():
            log.error("lost the leadership of %s%s", self.url.masked(), f" to {leader}" if leader else "")
            self.lost_leadership.set()
            for callback in self._callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("lost-leadership callback failed")
        return NotLeader(leader, f"this master no longer leads {self.url.masked()}"
                                 f"{f' ({leader} does)' if leader else ''}")

    def ensure(self) -> psycopg.Connection[Any]:
        """The writer session, reconnected (lock and term re-checked) if it broke. Runs on the store
        thread before each transaction begins."""
        assert self.writer is not None
        if self.lost_leadership.is_set():
            raise NotLeader("", f"this master no longer leads {self.url.masked()}")
        conn = self.writer.conn
        if not (conn.closed or conn.broken):
            return conn
        conn.close()
        try:
            fresh = self._lead()
        except NotLeader as exc:
            raise self._lose(exc.leader) from None
        try:
            term = _meta_int(fresh, "leader_term")
        except psycopg.Error as exc:
            fresh.close()
            raise lost(exc) from None
        if term != self._term:
            leader = _leader_address(fresh)
            fresh.close()
            raise self._lose(leader)
        log.warning("reconnected to the metadata database %s (still leading, term %d)", self.url.masked(), term)
        return fresh

    # ------------------------------------------------------------------ readers

    def reader(self) -> PgReader:
        with self._pool_lock:
            if self._pool is None:
                # default_transaction_read_only: the server itself refuses a write on a reader.
                self._pool = ConnectionPool(kwargs={**connect_kwargs(self.url, application="curvine-py reader"),
                                                    "autocommit": True,
                                                    "options": "-c default_transaction_read_only=on"},
                                            min_size=1, max_size=READER_POOL_SIZE, open=True,
                                            name="curvine-readers", reconnect_timeout=3600.0)
            return PgReader(self._pool)

    def close(self) -> None:
        """Closes the pool and the writer session (which releases the leader lock)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
        if self.writer is not None:
            # Given up before the session closes: a closed socket releases the lock only once the
            # server's backend has noticed and exited, and a master (or a test) reopening at once
            # would meanwhile be told that another master leads.
            self.writer.close(last=("SELECT pg_advisory_unlock(%s)", (LEADER_KEY,)))


def open_engine(url: MetaURL, *, advertise: str = "", **options: Any) -> Any:
    """The Namespace on PostgreSQL, leading it (NotLeader when another master does). `options` are
    Namespace's (block_size, root_class, ...)."""
    from curvine_py.master.namespace import Namespace  # namespace imports the store, not the reverse
    engine = PgEngine(url, advertise=advertise)
    try:
        ns = Namespace(url.masked(), engine=engine, **options)
        engine.claim()
    except psycopg.Error as exc:
        engine.close()
        raise CurvineError(f"{url.masked()}: {' '.join(str(exc).split())}") from None
    except BaseException:
        engine.close()
        raise
    return ns


def open_reader(url: MetaURL) -> Any:
    """A read-only Namespace (dump): no leadership, one pooled connection per snapshot."""
    from curvine_py.master.namespace import Namespace
    engine = PgEngine(url, lead=False)
    try:
        return Namespace(url.masked(), engine=engine, read_only=True)
    except BaseException:
        engine.close()
        raise
