"""The master database's connection and transactions: WAL with synchronous=FULL, BEGIN IMMEDIATE ..
COMMIT per mutation (a SAVEPOINT inside an open transaction or a group-commit batch), the meta table
(cluster id, epoch, block id counter, lease marker), and the uint64 <-> SQLite integer helpers.

Two engines: SQLite (a file, the default) and PostgreSQL (`engine=`, a PgEngine from pgengine.py,
whose connections offer the same sqlite3 subset; the SQL of the store is written to run on both).
"""
from __future__ import annotations

import logging
import pathlib
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from curvine_py.core.errors import (
    CurvineError,
    InvalidArgument,
)
from curvine_py.master.store.pgfuncs import PG_MIGRATIONS
from curvine_py.master.store.schema import _SCHEMA, MIGRATIONS, SCHEMA_VERSION, to_postgresql
from curvine_py.master.types import (
    ROOT_INO,
    FileType,
    StorageClass,
)

if TYPE_CHECKING:
    from curvine_py.master.store.pgengine import PgEngine

log = logging.getLogger(__name__)

SQLITE = "sqlite"
POSTGRESQL = "postgresql"

MAX_ID = (1 << 63) - 1
_IN_CHUNK = 500                  # ids per `IN (...)` (SQLite's variable limit is 32766; stay small)


def _u64_to_db(value: int) -> int:
    return value - (1 << 64) if value > MAX_ID else value


def _u64_from_db(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def _chunks(items: Sequence[int], size: int = _IN_CHUNK) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class Database:
    """The connection and its settings. Open with a path to the SQLite file (created, with the root,
    if new)."""

    def __init__(self, path: str, *, block_size: int = 64 << 20,
                 root_class: StorageClass = StorageClass.DURABLE, durable_replicas: int = 2,
                 clock_ns: Callable[[], int] = time.time_ns, read_only: bool = False,
                 unlink_grace_ms: int = 0, engine: PgEngine | None = None) -> None:
        if root_class == StorageClass.UNSPECIFIED:
            raise InvalidArgument("the root storage class must be cache or durable")
        self.path = path
        self.block_size = block_size
        self.root_class = root_class
        self.durable_replicas = durable_replicas
        self._clock_ns = clock_ns
        # Bumped (by the writer) by every change that can make a block's copies fewer or more than
        # its policy wants: the repairer skips its full scan while this and the epoch stand still.
        self.replica_changes = 0
        # A file that lost its last name stays readable this long, so a reader on another node
        # (whose open this master does not know of) can finish; then expire_orphans frees it.
        self.unlink_grace_ns = unlink_grace_ms * 1_000_000
        self.engine = engine
        self.dialect = SQLITE if engine is None else POSTGRESQL
        self._writer = not read_only
        self._quota_free = False      # see Quotas._any_quota
        self._cluster_id: str | None = None   # set once at creation; a load (bulk.py) forgets it
        self._db: Any
        if engine is not None:
            if read_only:
                self._db = engine.reader()
                return
            if engine.writer is None:
                raise CurvineError("a PostgreSQL store opened without its writer session")
            self._db = engine.writer
            self._init_schema()
            return
        # isolation_level=None: we issue BEGIN/COMMIT ourselves (the module's implicit transactions
        # would commit at surprising points). check_same_thread=False: created by main, used only by
        # the store thread (or, for a reader, the thread serving reads) afterwards.
        if read_only:
            self._db = sqlite3.connect(f"{pathlib.Path(path).absolute().as_uri()}?mode=ro", uri=True,
                                       isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA query_only=ON")
            # One reader per handler thread (up to 32): a smaller page cache each, so their sum
            # stays bounded; the OS page cache holds the file for all of them anyway.
            self._db.execute("PRAGMA cache_size=-8192")   # 8 MiB
            return
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=OFF")
        self._db.execute("PRAGMA temp_store=MEMORY")
        self._db.execute("PRAGMA cache_size=-65536")   # 64 MiB page cache
        mode = self._db.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            raise CurvineError(f"{path}: SQLite refused WAL mode ({mode})")
        self._init_schema()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One consistent read: a deferred transaction, so a multi-statement read (a path walk, a
        file's blocks) never mixes two commits."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()
        if self.engine is not None and (self.engine.writer is self._db or self.engine.writer is None):
            self.engine.close()     # the writer's store (or a dump's lone reader) owns the sessions

    def _init_schema(self) -> None:
        with self.transaction():
            have = self._db.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'" if self.dialect == SQLITE
                else "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() "
                     "AND table_name = 'meta'").fetchone()
            version = 0
            if have is not None:
                row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                version = int(row[0]) if row is not None else 0
            if version > SCHEMA_VERSION:
                raise CurvineError(f"{self.path}: schema version {version} is newer than this master's "
                                   f"({SCHEMA_VERSION})")
            if version == 0:
                self._run_ddl(_SCHEMA)
                version = 1
                now = self._now()
                self._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                    ("schema_version", version), ("cluster_id", uuid.uuid4().hex),
                    ("next_block_id", 1), ("epoch", 0)])
                self._db.execute(
                    "INSERT INTO inodes (ino, type, mode, uid, gid, nlink, atime_ns, mtime_ns, ctime_ns,"
                    " block_size, parent, p_class, p_replicas, p_ttl_ms, p_block_size, p_placement,"
                    " p_compress) VALUES (?, ?, ?, 0, 0, 2, ?, ?, ?, ?, 0, ?, 0, 0, 0, '', 0)",
                    (ROOT_INO, int(FileType.DIRECTORY), 0o755, now, now, now, self.block_size,
                     int(self.root_class)))
                if self.dialect == POSTGRESQL:   # the root took ino 1 explicitly: the identity moves past it
                    self._db.execute("SELECT setval(pg_get_serial_sequence('inodes', 'ino'), ?)", (ROOT_INO,))
                log.info("created namespace %s", self.path)
            while version < SCHEMA_VERSION:
                version += 1
                self._run_ddl(MIGRATIONS[version])
                if self.dialect == POSTGRESQL:        # whole statements: PL/pgSQL bodies hold ';'
                    for statement in PG_MIGRATIONS.get(version, ()):
                        self._db.execute(statement)
                self._set_meta("schema_version", version)
                log.info("%s: schema migrated to version %d", self.path, version)

    def _run_ddl(self, script: str) -> None:
        if self.dialect == POSTGRESQL:
            script = to_postgresql(script)
        for statement in script.split(";"):
            if statement.strip():
                self._db.execute(statement)

    def schema_version(self) -> int:
        return int(self._meta("schema_version"))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic unit: BEGIN IMMEDIATE .. COMMIT, or a SAVEPOINT when a transaction (an outer
        operation or a group-commit `batch()`) is already open, so a failure rolls back only itself."""
        if self._db.in_transaction:
            self._db.execute("SAVEPOINT op")
            try:
                yield
                # Inside the try: on PostgreSQL the RELEASE is where a statement still in flight
                # reports its error (store/pgconn.py), which must roll back this unit alone.
                self._db.execute("RELEASE op")
            except BaseException:
                self._db.execute("ROLLBACK TO op")
                self._db.execute("RELEASE op")
                raise
            return
        with self._immediate():
            yield

    @contextmanager
    def batch(self, calls: int = 0, *, deferring: bool = False,
              then: Callable[[CurvineError | None], None] | None = None) -> Iterator[None]:
        """Group commit: the operations run inside share one COMMIT (one fsync). The caller must not
        reply to any of them before this block has exited without an exception, and, with `then`,
        before then(None) said the batch is durable. `calls`: how many operations it will run, when
        known (a batch of one lets PostgreSQL commit a one-statement call with that statement:
        pgconn.PgWriter.whole). `deferring`: the caller resolves every `pgfast.Deferred` answer
        once the batch is durable (storethread.py), so PostgreSQL may send a batch's one-statement
        calls without waiting for each answer. `then`: called once, on this thread, with None when
        the COMMIT is durable or with the error that says it is not; PostgreSQL may leave the
        COMMIT in flight and call it later (before a later batch reads or commits anything, or at
        settle()), SQLite calls it as the block exits. Not called when the block raises."""
        if self._db.in_transaction:
            raise RuntimeError("batch() inside a transaction")
        with self._immediate(single=calls == 1, then=then):
            if self.engine is not None:
                self._db.deferring = deferring
            yield

    def settle(self) -> None:
        """PostgreSQL: waits for a batch's COMMIT left in flight and calls its `then`. SQLite: nothing."""
        if self.engine is not None and self._writer:
            self._db.settle()

    @contextmanager
    def _immediate(self, *, single: bool = False,
                   then: Callable[[CurvineError | None], None] | None = None) -> Iterator[None]:
        """BEGIN IMMEDIATE .. COMMIT, rolled back on any exception (a transaction or a batch);
        `single`: it holds one operation at most; `then`: see batch()."""
        if self.engine is not None:
            self.engine.check_lease()     # a leader whose lease ran out writes nothing (leaderlease.py)
            self._db.then = then          # PgWriter: the COMMIT may stay in flight, `then` hears of it
        self._db.execute("BEGIN IMMEDIATE")
        if self.engine is not None:
            self._db.single = single
        try:
            yield
            if self.engine is not None:
                self.engine.check_lease()  # ... nor sends a COMMIT after it ran out
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        if self.engine is None and then is not None:
            then(None)

    def _now(self) -> int:
        return self._clock_ns()

    def _meta(self, key: str) -> int | str:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise CurvineError(f"missing meta key {key}")
        value: int | str = row[0]
        return value

    def _set_meta(self, key: str, value: int | str) -> None:
        self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         (key, value if self.dialect == SQLITE else str(value)))

    def set_leader_address(self, address: str) -> None:
        """The address this master serves on, for the masters that find it leading (NotLeader)."""
        with self.transaction():
            self._set_meta("leader_address", address)

    def renew_leader_lease(self) -> None:
        """PostgreSQL: extends this master's leader lease, in its own term only (pgengine.py,
        master/leaderlease.py); NotLeader when the term in the database is another master's."""
        if self.engine is None:
            raise CurvineError("only a PostgreSQL master keeps a leader lease")
        sql, params = self.engine.renewal()
        with self.transaction():
            renewed = self._db.execute(sql, params).rowcount
        if renewed != 1:
            raise self.engine.fence("the leader term in the database is not this master's")

    @property
    def cluster_id(self) -> str:
        # Kept: every GetMembership asks, and on PostgreSQL each read is a round trip.
        if self._cluster_id is None:
            self._cluster_id = str(self._meta("cluster_id"))
        return self._cluster_id

    def epoch(self) -> int:
        return int(self._meta("epoch"))

    def set_epoch(self, epoch: int) -> None:
        """Call inside a transaction (Membership does, together with the worker rows)."""
        self._set_meta("epoch", epoch)

    def lease_marker(self) -> int:
        """The term (ms) of directory leases granted by a master on this store since the marker was
        last cleared; 0 when none were."""
        row = self._db.execute("SELECT value FROM meta WHERE key='dir_lease_term_ms'").fetchone()
        return int(row[0]) if row is not None else 0

    def set_lease_marker(self, term_ms: int) -> None:
        self._set_meta("dir_lease_term_ms", term_ms)
