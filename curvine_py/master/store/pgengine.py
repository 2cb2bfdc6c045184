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

Leader lease (master/leaderlease.py). The lock lives as long as the session, and a stopped
master's session stays open. So a leading master also keeps `meta.leader_lease_until` (the
database clock's epoch ms) extended through its writer, and its writer session is named
`curvine-py leader`: a standby that finds the lock taken and that lease run out ends the holder's
session (`pg_terminate_backend`, which rolls its open transaction back and frees the lock) and takes
the lock. A `meta load` keeps no lease and is never ended so. The writer session also gets
server-side idle timeouts and TCP keepalives, so a dead or partitioned leader's backend goes by
itself too. The leader fences itself on its own clock (Lease, checked before every BEGIN and
COMMIT: `check_lease`).

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

from curvine_py.core.errors import CurvineError, NotLeader, Unauthenticated, Unavailable
from curvine_py.master.engine.url import MetaURL
from curvine_py.master.leaderlease import BREAK_MARGIN_MS, STARTUP_LEASE_S, Lease
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
LEADER_APPLICATION = "curvine-py leader"     # the writer session of a master that keeps a lease
LOADER_APPLICATION = "curvine-py meta load"  # ... of a writer that keeps none (never ended by a standby)
_KEY = LEADER_KEY & 0xFFFF_FFFF_FFFF_FFFF   # pg_locks shows a bigint advisory key as two oids
_DB_NOW_MS = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
_SET_LEASE = (f"INSERT INTO meta (key, value) VALUES ('leader_lease_until', CAST({_DB_NOW_MS} + %s AS TEXT)) "
              "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
# A renewal through the store (Database.renew_leader_lease, `?` placeholders): only in this term.
RENEW_LEASE = (f"UPDATE meta SET value = CAST({_DB_NOW_MS} + ? AS TEXT) WHERE key = 'leader_lease_until' "
               "AND EXISTS (SELECT 1 FROM meta t WHERE t.key = 'leader_term' AND t.value = ?)")
# Ends the session of a leader whose lease ran out: (pid, ms past the lease, terminated).
_BREAK_EXPIRED = (
    f"SELECT a.pid, {_DB_NOW_MS} - CAST(m.value AS BIGINT), pg_terminate_backend(a.pid, 1000) "
    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid, meta m "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid::bigint = %s AND l.objid::bigint = %s AND a.application_name = %s "
    f"AND m.key = 'leader_lease_until' AND CAST(m.value AS BIGINT) + %s < {_DB_NOW_MS}")


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
        if _refused_credentials(exc, reason):
            # Not a database that is away for now: retrying will not help, say what is wrong.
            raise Unauthenticated(f"the metadata database {url.masked()} refused the credentials: {reason}") \
                from None
        raise Unavailable(f"cannot connect to the metadata database {url.masked()}: {reason}") from None


def _refused_credentials(exc: psycopg.OperationalError, reason: str) -> bool:
    """A wrong password or user (SQLSTATE 28P01/28000), which libpq reports as a connection error."""
    if getattr(exc, "sqlstate", None) in ("28P01", "28000"):
        return True
    text = reason.lower()
    return "authentication failed" in text or "no password supplied" in text or "no pg_hba.conf entry" in text


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

    def __init__(self, url: MetaURL, *, advertise: str = "", lead: bool = True, lease: Lease | None = None) -> None:
        self.url = url
        self.advertise = advertise
        # A master keeps a lease; a `meta load` (lease None) keeps none and holds the lock as it always did.
        self.keeps_lease = lease is not None
        self.lease = lease if lease is not None else Lease()
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

    def _lead(self, *, first: bool = True) -> psycopg.Connection[Any]:
        """A new writer session holding the leader lock, or NotLeader. A master (keeps_lease) ends
        the session of a holder whose lease ran out first, and (`first`: not a reconnect, whose
        term is checked before anything is written) takes a startup lease."""
        conn = connect(self.url, application=LEADER_APPLICATION if self.keeps_lease else LOADER_APPLICATION)
        try:
            held = self._try_lock(conn)
            if not held and first and self.keeps_lease and self._break_expired(conn):
                held = self._try_lock(conn)
            if not held:
                leader = _leader_address(conn)
                raise NotLeader(leader, f"{self.url.masked()}: another master leads this metadata database"
                                        f"{f' (at {leader})' if leader else ''}")
            if self.keeps_lease:
                self._guard_session(conn)
                if first:
                    self._extend(conn, STARTUP_LEASE_S)
        except psycopg.Error as exc:
            conn.close()
            raise lost(exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _try_lock(conn: psycopg.Connection[Any]) -> bool:
        return conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_KEY,)).fetchone() == (True,)

    def _break_expired(self, conn: psycopg.Connection[Any]) -> bool:
        """Ends the session of the lock holder whose lease ran out (True when one was ended)."""
        if conn.execute("SELECT to_regclass('meta')").fetchone() == (None,):
            return False
        rows = conn.execute(_BREAK_EXPIRED, (_KEY >> 32, _KEY & 0xFFFF_FFFF, LEADER_APPLICATION,
                                             BREAK_MARGIN_MS)).fetchall()
        for pid, late_ms, ended in rows:
            if ended:
                log.warning("the leader's lease on %s ran out %d ms ago: ended its session (backend %d)",
                            self.url.masked(), late_ms, pid)
            else:
                log.error("the leader's lease on %s ran out %d ms ago but its session (backend %d) could not "
                          "be ended: does the user lack the right to signal it?", self.url.masked(), late_ms, pid)
        return any(ended for _pid, _late, ended in rows)

    def _guard_session(self, conn: psycopg.Connection[Any]) -> None:
        """Server-side bounds on the writer session: a backend whose master stopped talking (idle,
        or idle inside a transaction) or whose peer is gone (TCP) ends, and the lock goes with it."""
        idle = str(self.lease.lease_ms * 2)
        settings = [("idle_in_transaction_session_timeout", idle), ("tcp_keepalives_idle", "2"),
                    ("tcp_keepalives_interval", "1"), ("tcp_keepalives_count", "3"), ("tcp_user_timeout", idle)]
        if conn.info.server_version >= 140000:
            settings.append(("idle_session_timeout", idle))
        conn.execute("SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings),
                     [value for pair in settings for value in pair])

    def _extend(self, conn: psycopg.Connection[Any], lease_s: float) -> None:
        """Sets the lease in the database (autocommit) and, once that answered, here."""
        sent = self.lease.now()
        if conn.execute("SELECT to_regclass('meta')").fetchone() != (None,):
            conn.execute(_SET_LEASE, (int(lease_s * 1000),))
        self.lease.granted(sent, lease_s)

    def renewal(self) -> tuple[str, tuple[Any, ...]]:
        """The statement (store placeholders) that renews this master's lease in its term."""
        return RENEW_LEASE, (self.lease.lease_ms, str(self._term))

    def check_lease(self) -> None:
        """Raises NotLeader (and steps down) when this master may no longer write: before every
        BEGIN and COMMIT of the writer (Database._immediate)."""
        if self.lost_leadership.is_set():
            raise NotLeader("", f"this master no longer leads {self.url.masked()}")
        if self.keeps_lease and self.lease.expired():
            raise self.fence(f"its leader lease ran out {-self.lease.left_s():.1f} s ago")

    def fence(self, reason: str) -> NotLeader:
        """This master stops writing and steps down (the lease keeper, a failed renewal)."""
        log.error("leadership of %s given up: %s", self.url.masked(), reason)
        return self._lose("")

    def claim(self) -> None:
        """Called once the schema exists: a new term begins, with this master's address."""
        assert self.writer is not None
        conn = self.writer.conn
        sent = self.lease.now()
        with conn.transaction():
            self._term = _meta_int(conn, "leader_term") + 1
            conn.execute("INSERT INTO meta (key, value) VALUES ('leader_term', %s) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(self._term),))
            if self.keeps_lease:
                conn.execute(_SET_LEASE, (int(STARTUP_LEASE_S * 1000),))
            if self.advertise:
                conn.execute("INSERT INTO meta (key, value) VALUES ('leader_address', %s) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (self.advertise,))
        if self.keeps_lease:
            self.lease.granted(sent, STARTUP_LEASE_S)
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
        self.check_lease()            # a reconnect after the lease ran out would be a write without one
        try:
            fresh = self._lead(first=False)
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
            # unlock_all: a session lock taken twice is held until unlocked twice.
            self.writer.close(last=("SELECT pg_advisory_unlock_all()", ()))


def open_engine(url: MetaURL, *, advertise: str = "", lease: Lease | None = None, **options: Any) -> Any:
    """The Namespace on PostgreSQL, leading it (NotLeader when another master does). `lease`: a
    master's leader lease (None: a `meta load`, which keeps none). `options` are Namespace's
    (block_size, root_class, ...)."""
    from curvine_py.master.namespace import Namespace  # namespace imports the store, not the reverse
    engine = PgEngine(url, advertise=advertise, lease=lease)
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
