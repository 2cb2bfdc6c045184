"""The master's durable state: namespace, file blocks, block locations, pending deletions, workers.

One SQLite database in WAL mode with `synchronous=FULL`: a mutation is one transaction, and its
reply is sent only after the commit returned (the commit fsyncs the WAL). Every method here is the
plain-Python semantics of one Master RPC; the gRPC service only converts.

Concurrency rule: a `Namespace` is used by one thread at a time (the master's store thread; unit
tests call it directly). Methods are not re-entrant across threads.

Transactions: a mutation runs `with self.transaction():`, which is BEGIN IMMEDIATE .. COMMIT, or a
SAVEPOINT inside an open transaction: inside `batch()` (group commit, see storethread.py) a failing
operation rolls back only itself and the whole batch is made durable by one COMMIT before any reply.

Ids: inode numbers come from an AUTOINCREMENT key (never reused, so the generation stays 0), block
ids from a counter in `meta`. Both fit SQLite's signed 64-bit integers; uint64 values from the wire
above 2**63-1 are treated as unknown.
"""
from __future__ import annotations

import errno
import logging
import pathlib
import sqlite3
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from curvine_py.core.errors import (
    AlreadyExists,
    CurvineError,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    NameTooLong,
    NoData,
    NotADirectory,
    NotFound,
    NotPermitted,
    Unavailable,
)
from curvine_py.core.keys import PATH_MAX, validate_name
from curvine_py.master import placement
from curvine_py.master.types import (
    PLACEMENT_HASH,
    PLACEMENT_LOCAL,
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    ROOT_INO,
    XATTR_CREATE,
    XATTR_REPLACE,
    AddedBlock,
    Attr,
    BlockInfo,
    DirEntry,
    Evicted,
    FileBlocks,
    FileType,
    NamespaceCounts,
    Policy,
    PolicyAt,
    RenameResult,
    SetAttrChanges,
    StatFs,
    StorageClass,
    UnlinkResult,
    WorkerInfo,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_ID = (1 << 63) - 1
SYMLOOP_MAX = 40                 # as Linux: more symlinks than this in one resolution is ELOOP
XATTR_NAME_MAX = 255
XATTR_VALUE_MAX = 64 * 1024      # as Linux (XATTR_SIZE_MAX)
READDIR_DEFAULT_LIMIT = 1000
READDIR_MAX_LIMIT = 10_000
MAX_REPLICAS = 16
MIN_BLOCK_SIZE = 4096
MAX_BLOCK_SIZE = 1 << 31
REPORT_GRACE_MS = 60_000         # a block report may predate a commit by this much (see reconcile)
_IN_CHUNK = 500                  # ids per `IN (...)` (SQLite's variable limit is 32766; stay small)

_ATTR_COLS = ("ino, type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, "
              "generation, block_size")

_ATTR_COLS_I = ", ".join("i." + c.strip() for c in _ATTR_COLS.split(","))   # joined with dentries d

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value ANY NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inodes (
    ino INTEGER PRIMARY KEY AUTOINCREMENT,
    type INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    size INTEGER NOT NULL DEFAULT 0,
    nlink INTEGER NOT NULL,
    atime_ns INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    rdev INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0,
    block_size INTEGER NOT NULL DEFAULT 0,
    target TEXT,                        -- symlink target
    parent INTEGER NOT NULL DEFAULT 0,  -- a directory holding a link (policy lookup, subtree checks)
    orphan INTEGER NOT NULL DEFAULT 0,  -- nlink 0 and kept: 1 open by a client (freed by ReleaseOrphan),
                                        -- 2 in the unlink grace since ctime_ns (freed by expire_orphans)
    p_class INTEGER,                    -- directory policy, NULL = none (inherit)
    p_replicas INTEGER,
    p_ttl_ms INTEGER,
    p_block_size INTEGER,
    p_placement TEXT,
    p_compress INTEGER
);
CREATE TABLE IF NOT EXISTS dentries (
    parent INTEGER NOT NULL,
    name TEXT NOT NULL,
    ino INTEGER NOT NULL,
    PRIMARY KEY (parent, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dentries_by_ino ON dentries (ino);
CREATE INDEX IF NOT EXISTS inodes_orphans ON inodes (orphan, ctime_ns) WHERE orphan != 0;
CREATE TABLE IF NOT EXISTS orphan_keepers (   -- the client session that keeps an orphan=1 inode
    ino INTEGER PRIMARY KEY,
    session TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blocks (
    ino INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    block_id INTEGER NOT NULL UNIQUE,
    length INTEGER NOT NULL,
    checksum INTEGER NOT NULL,          -- uint64 stored as signed two-complement
    committed_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (ino, idx)
) WITHOUT ROWID;
-- allocated by AddBlock, not yet committed: known to reconcile, freed with the inode
CREATE TABLE IF NOT EXISTS open_blocks (
    block_id INTEGER PRIMARY KEY,
    ino INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    workers TEXT NOT NULL,              -- chosen worker ids, comma separated
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS open_blocks_by_ino ON open_blocks (ino);
CREATE TABLE IF NOT EXISTS locations (
    block_id INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    PRIMARY KEY (block_id, worker_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS locations_by_worker ON locations (worker_id);
CREATE TABLE IF NOT EXISTS xattrs (
    ino INTEGER NOT NULL,
    name TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (ino, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deletions (
    worker_id TEXT NOT NULL,
    block_id INTEGER NOT NULL,
    PRIMARY KEY (worker_id, block_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    unix_socket TEXT NOT NULL,
    node TEXT NOT NULL,
    capacity INTEGER NOT NULL,
    used INTEGER NOT NULL,
    available INTEGER NOT NULL,
    lm_port INTEGER NOT NULL,
    live INTEGER NOT NULL,
    last_heartbeat_ms INTEGER NOT NULL,
    blocks INTEGER NOT NULL,
    objects INTEGER NOT NULL,
    evictions INTEGER NOT NULL
) WITHOUT ROWID;
"""

_WORKER_COLS = ("worker_id, host, port, unix_socket, node, capacity, used, available, lm_port, live, "
                "last_heartbeat_ms, blocks, objects, evictions")


def _u64_to_db(value: int) -> int:
    return value - (1 << 64) if value > MAX_ID else value


def _u64_from_db(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def _chunks(items: Sequence[int], size: int = _IN_CHUNK) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _attr(row: Sequence[int]) -> Attr:
    return Attr(ino=row[0], type=FileType(row[1]), mode=row[2], uid=row[3], gid=row[4], size=row[5],
                nlink=row[6], atime_ns=row[7], mtime_ns=row[8], ctime_ns=row[9], rdev=row[10],
                generation=row[11], block_size=row[12])


def _type_error(kind: FileType, expected: str) -> CurvineError:
    if kind == FileType.DIRECTORY:
        return IsADirectory(f"is a directory (expected {expected})")
    return InvalidArgument(f"not a {expected}")


class Namespace:
    """The durable store. Open with a path to the SQLite file (created, with the root, if new)."""

    def __init__(self, path: str, *, block_size: int = 64 << 20,
                 root_class: StorageClass = StorageClass.DURABLE, durable_replicas: int = 2,
                 clock_ns: Callable[[], int] = time.time_ns, read_only: bool = False,
                 unlink_grace_ms: int = 0) -> None:
        if root_class == StorageClass.UNSPECIFIED:
            raise InvalidArgument("the root storage class must be cache or durable")
        self.path = path
        self.block_size = block_size
        self.root_class = root_class
        self.durable_replicas = durable_replicas
        self._clock_ns = clock_ns
        # A file that lost its last name stays readable this long, so a reader on another node
        # (whose open this master does not know of) can finish; then expire_orphans frees it.
        self.unlink_grace_ns = unlink_grace_ms * 1_000_000
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

    # ------------------------------------------------------------------ plumbing

    def reader(self) -> Namespace:
        """A read-only view of the same database on its own connection, for serving lookups
        without queueing behind the store thread's writes and fsyncs. It sees only committed state,
        which is exactly what has been acknowledged (group commit replies after COMMIT). Use one
        reader per thread, and its `snapshot()` around reads of several statements."""
        return Namespace(self.path, block_size=self.block_size, root_class=self.root_class,
                         durable_replicas=self.durable_replicas, clock_ns=self._clock_ns, read_only=True)

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

    def _init_schema(self) -> None:
        with self.transaction():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            have = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if have is None:
                now = self._now()
                self._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                    ("schema_version", SCHEMA_VERSION), ("cluster_id", uuid.uuid4().hex),
                    ("next_block_id", 1), ("epoch", 0)])
                self._db.execute(
                    "INSERT INTO inodes (ino, type, mode, uid, gid, nlink, atime_ns, mtime_ns, ctime_ns,"
                    " block_size, parent, p_class, p_replicas, p_ttl_ms, p_block_size, p_placement,"
                    " p_compress) VALUES (?, ?, ?, 0, 0, 2, ?, ?, ?, ?, 0, ?, 0, 0, 0, '', 0)",
                    (ROOT_INO, int(FileType.DIRECTORY), 0o755, now, now, now, self.block_size,
                     int(self.root_class)))
                log.info("created namespace %s", self.path)
            elif int(have[0]) != SCHEMA_VERSION:
                raise CurvineError(f"{self.path}: schema version {have[0]}, expected {SCHEMA_VERSION}")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic unit: BEGIN IMMEDIATE .. COMMIT, or a SAVEPOINT when a transaction (an outer
        operation or a group-commit `batch()`) is already open, so a failure rolls back only itself."""
        if self._db.in_transaction:
            self._db.execute("SAVEPOINT op")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK TO op")
                self._db.execute("RELEASE op")
                raise
            self._db.execute("RELEASE op")
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: the operations run inside share one COMMIT (one fsync). The caller must not
        reply to any of them before this block has exited without an exception."""
        if self._db.in_transaction:
            raise RuntimeError("batch() inside a transaction")
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _now(self) -> int:
        return self._clock_ns()

    def _meta(self, key: str) -> int | str:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise CurvineError(f"missing meta key {key}")
        value: int | str = row[0]
        return value

    def _set_meta(self, key: str, value: int | str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    @property
    def cluster_id(self) -> str:
        return str(self._meta("cluster_id"))

    def epoch(self) -> int:
        return int(self._meta("epoch"))

    def set_epoch(self, epoch: int) -> None:
        """Call inside a transaction (Membership does, together with the worker rows)."""
        self._set_meta("epoch", epoch)

    # ------------------------------------------------------------------ inode helpers

    def _row(self, ino: int) -> Sequence[int]:
        if not 0 < ino <= MAX_ID:
            raise NotFound(f"no inode {ino}")
        # An inode in its unlink grace (orphan=2) is gone for every call: a new open by inode must
        # fail (ESTALE, so the kernel looks the name up again and finds the new file). Only its
        # blocks stay, for handles that already hold the block map.
        row = self._db.execute(f"SELECT {_ATTR_COLS} FROM inodes WHERE ino=? AND orphan!=2", (ino,)).fetchone()
        if row is None:
            raise NotFound(f"no inode {ino}")
        return row  # type: ignore[no-any-return]

    def _get(self, ino: int) -> Attr:
        return _attr(self._row(ino))

    def _dir(self, ino: int) -> Attr:
        attr = self._get(ino)
        if attr.type != FileType.DIRECTORY:
            raise NotADirectory(f"inode {ino} is not a directory")
        return attr

    def _child(self, parent: int, name: str) -> int | None:
        row = self._db.execute("SELECT ino FROM dentries WHERE parent=? AND name=?",
                               (parent, name)).fetchone()
        return None if row is None else int(row[0])

    def _type_of(self, ino: int) -> FileType:
        row = self._db.execute("SELECT type FROM inodes WHERE ino=?", (ino,)).fetchone()
        if row is None:
            raise NotFound(f"no inode {ino}")
        return FileType(row[0])

    def _touch_dir(self, ino: int, now: int) -> None:
        self._db.execute("UPDATE inodes SET mtime_ns=?, ctime_ns=? WHERE ino=?", (now, now, ino))

    def _add_nlink(self, ino: int, delta: int) -> int:
        row = self._db.execute("UPDATE inodes SET nlink = nlink + ? WHERE ino=? RETURNING nlink",
                               (delta, ino)).fetchone()
        return int(row[0])

    def _is_same_or_descendant(self, ino: int, ancestor: int) -> bool:
        """Walks `ino`'s parents up to the root (directories have exactly one parent)."""
        current = ino
        for _ in range(1 << 16):
            if current == ancestor:
                return True
            if current in (ROOT_INO, 0):
                return False
            row = self._db.execute("SELECT parent FROM inodes WHERE ino=?", (current,)).fetchone()
            if row is None:
                return False
            current = int(row[0])
        raise CurvineError("directory tree too deep or cyclic")

    def _path_of(self, ino: int) -> str:
        names: list[str] = []
        current = ino
        while current != ROOT_INO:
            row = self._db.execute("SELECT parent, name FROM dentries WHERE ino=? LIMIT 1",
                                   (current,)).fetchone()
            if row is None:
                return ""  # unlinked
            names.append(row[1])
            current = int(row[0])
        return "/" + "/".join(reversed(names))

    # ------------------------------------------------------------------ freeing

    def _drop_block(self, block_id: int) -> None:
        """Forget a committed block; every worker holding it gets a pending deletion."""
        self._db.execute("INSERT OR IGNORE INTO deletions (worker_id, block_id) "
                         "SELECT worker_id, block_id FROM locations WHERE block_id=?", (block_id,))
        self._db.execute("DELETE FROM locations WHERE block_id=?", (block_id,))
        self._db.execute("DELETE FROM blocks WHERE block_id=?", (block_id,))

    def _drop_open_block(self, block_id: int, workers: str) -> None:
        self._db.executemany("INSERT OR IGNORE INTO deletions (worker_id, block_id) VALUES (?, ?)",
                             [(w, block_id) for w in workers.split(",") if w])
        self._db.execute("DELETE FROM open_blocks WHERE block_id=?", (block_id,))

    def _free_inode(self, ino: int) -> None:
        for (block_id,) in self._db.execute("SELECT block_id FROM blocks WHERE ino=?", (ino,)).fetchall():
            self._drop_block(int(block_id))
        for block_id, workers in self._db.execute(
                "SELECT block_id, workers FROM open_blocks WHERE ino=?", (ino,)).fetchall():
            self._drop_open_block(int(block_id), workers)
        self._db.execute("DELETE FROM xattrs WHERE ino=?", (ino,))
        self._db.execute("DELETE FROM orphan_keepers WHERE ino=?", (ino,))
        self._db.execute("DELETE FROM inodes WHERE ino=?", (ino,))

    def _unlinked_from(self, ino: int, nlink: int, keep_orphan: bool, keeper: str = "") -> None:
        """Bookkeeping after one name of a non-directory went away and nlink dropped to `nlink`."""
        if nlink <= 0:
            if keep_orphan:
                self._db.execute("UPDATE inodes SET orphan=1, nlink=0 WHERE ino=?", (ino,))
                if keeper:
                    self._db.execute("INSERT OR REPLACE INTO orphan_keepers (ino, session) VALUES (?, ?)",
                                     (ino, keeper))
            else:
                self._free_later(ino)
            return
        row = self._db.execute("SELECT parent FROM dentries WHERE ino=? LIMIT 1", (ino,)).fetchone()
        if row is not None:
            self._db.execute("UPDATE inodes SET parent=? WHERE ino=?", (int(row[0]), ino))

    def _free_later(self, ino: int) -> None:
        """An inode without names and without a client keeping it: freed after the unlink grace."""
        if self.unlink_grace_ns <= 0:
            self._free_inode(ino)
        else:
            self._db.execute("UPDATE inodes SET orphan=2, nlink=0, ctime_ns=? WHERE ino=?", (self._now(), ino))

    def kept_orphans(self) -> list[tuple[int, str]]:
        """(inode, keeping session) of every orphan a client keeps open."""
        return [(int(ino), str(session)) for ino, session in
                self._db.execute("SELECT ino, session FROM orphan_keepers").fetchall()]

    def expire_orphans(self, limit: int = 1000) -> int:
        """Frees up to `limit` inodes whose unlink grace is over; returns how many."""
        with self.transaction():
            cutoff = self._now() - self.unlink_grace_ns
            rows = self._db.execute("SELECT ino FROM inodes WHERE orphan=2 AND ctime_ns<=? LIMIT ?",
                                    (cutoff, limit)).fetchall()
            for (ino,) in rows:
                self._free_inode(int(ino))
        return len(rows)

    def _truncate_blocks(self, ino: int, size: int, block_size: int) -> None:
        """Sparse truncate: blocks wholly beyond `size` are dropped, a straddling block keeps only
        its first bytes (its checksum becomes unknown: 0). Nothing is ever allocated."""
        first_gone = -(-size // block_size)
        for (block_id,) in self._db.execute("SELECT block_id FROM blocks WHERE ino=? AND idx>=?",
                                            (ino, first_gone)).fetchall():
            self._drop_block(int(block_id))
        if size % block_size:
            index = size // block_size
            keep = size - index * block_size
            self._db.execute("UPDATE blocks SET length=?, checksum=0 WHERE ino=? AND idx=? AND length>?",
                             (keep, ino, index, keep))

    # ------------------------------------------------------------------ lookups

    def lookup(self, parent: int, name: str) -> Attr:
        parent_attr = self._dir(parent)
        if name == ".":
            return parent_attr
        if name == "..":
            if parent == ROOT_INO:
                return parent_attr
            row = self._db.execute("SELECT parent FROM inodes WHERE ino=?", (parent,)).fetchone()
            return self._get(int(row[0]))
        validate_name(name)
        row = self._db.execute(
            f"SELECT {_ATTR_COLS_I} FROM dentries d "
            "JOIN inodes i ON i.ino = d.ino WHERE d.parent=? AND d.name=?", (parent, name)).fetchone()
        if row is None:
            raise NotFound(f"{name!r} not found in {parent}")
        return _attr(row)

    def getattr(self, ino: int) -> Attr:
        return self._get(ino)

    def _resolve(self, path: str, follow_symlinks: bool) -> int:
        if not path.startswith("/"):
            raise InvalidArgument(f"path must be absolute: {path!r}")
        if "\x00" in path:
            raise InvalidArgument("path contains NUL")
        if len(path.encode("utf-8", "surrogateescape")) > PATH_MAX:
            raise NameTooLong(f"path longer than {PATH_MAX} bytes")
        stack: list[tuple[int, FileType]] = [(ROOT_INO, FileType.DIRECTORY)]
        parts = deque(path.split("/"))
        links = 0
        while parts:
            name = parts.popleft()
            current, kind = stack[-1]
            if kind != FileType.DIRECTORY:
                raise NotADirectory(f"{path}: a component is not a directory")
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) > 1:
                    stack.pop()
                continue
            if len(name.encode("utf-8", "surrogateescape")) > 255:
                raise NameTooLong(f"{path}: component longer than 255 bytes")
            row = self._db.execute(
                "SELECT i.ino, i.type, i.target FROM dentries d JOIN inodes i ON i.ino = d.ino "
                "WHERE d.parent=? AND d.name=?", (current, name)).fetchone()
            if row is None:
                raise NotFound(f"{path}: {name!r} not found")
            child, child_kind, target = int(row[0]), FileType(row[1]), row[2]
            # Intermediate symlinks are always followed; the last one only when asked. A trailing
            # slash leaves "" in `parts`, which makes the link intermediate, as POSIX wants.
            if child_kind == FileType.SYMLINK and (parts or follow_symlinks):
                links += 1
                if links > SYMLOOP_MAX:
                    raise CurvineError(f"{path}: too many levels of symbolic links", errno=errno.ELOOP)
                if target.startswith("/"):
                    del stack[1:]
                parts.extendleft(reversed(target.split("/")))
                continue
            stack.append((child, child_kind))
        return stack[-1][0]

    def resolve_path(self, path: str, follow_symlinks: bool = True) -> Attr:
        return self._get(self._resolve(path, follow_symlinks))

    def readdir(self, ino: int, after_name: str = "", limit: int = 0) -> tuple[list[DirEntry], bool]:
        """Entries sorted by name (bytewise UTF-8), after `after_name`; returns (entries, more)."""
        self._dir(ino)
        limit = READDIR_DEFAULT_LIMIT if limit <= 0 else min(limit, READDIR_MAX_LIMIT)
        rows = self._db.execute(
            f"SELECT d.name, {_ATTR_COLS_I} FROM dentries d JOIN inodes i ON i.ino = d.ino "
            "WHERE d.parent=? AND d.name>? ORDER BY d.name LIMIT ?", (ino, after_name, limit + 1)).fetchall()
        entries = [DirEntry(row[0], _attr(row[1:])) for row in rows[:limit]]
        return entries, len(rows) > limit

    def names(self, ino: int, limit: int) -> list[str] | None:
        """Every name in directory `ino`, or None when it holds more than `limit` (a lease's listing)."""
        self._dir(ino)
        rows = self._db.execute("SELECT name FROM dentries WHERE parent=? LIMIT ?", (ino, limit + 1)).fetchall()
        return None if len(rows) > limit else [row[0] for row in rows]

    def lease_marker(self) -> int:
        """The term (ms) of directory leases granted by a master on this store since the marker was
        last cleared; 0 when none were."""
        row = self._db.execute("SELECT value FROM meta WHERE key='dir_lease_term_ms'").fetchone()
        return int(row[0]) if row is not None else 0

    def set_lease_marker(self, term_ms: int) -> None:
        self._set_meta("dir_lease_term_ms", term_ms)

    def readlink(self, ino: int) -> str:
        row = self._db.execute("SELECT type, target FROM inodes WHERE ino=?", (ino,)).fetchone() \
            if 0 < ino <= MAX_ID else None
        if row is None:
            raise NotFound(f"no inode {ino}")
        if FileType(row[0]) != FileType.SYMLINK:
            raise InvalidArgument(f"inode {ino} is not a symlink")
        return str(row[1])

    # ------------------------------------------------------------------ mutations

    def create(self, parent: int, name: str, type: FileType | int, mode: int = 0o644, *, uid: int = 0,
               gid: int = 0, rdev: int = 0, symlink_target: str = "", exclusive: bool = True,
               truncate: bool = False) -> Attr:
        """Files, directories, symlinks, fifos, sockets and devices. Non-exclusive create of an
        existing regular file returns it (O_CREAT without O_EXCL), emptied when `truncate`."""
        validate_name(name)
        try:
            kind = FileType(type)
        except ValueError:
            raise InvalidArgument(f"unknown file type {type}") from None
        if kind == FileType.UNSPECIFIED:
            raise InvalidArgument("file type is required")
        if kind == FileType.SYMLINK:
            if not symlink_target:
                raise InvalidArgument("a symlink needs a target")
            if len(symlink_target.encode("utf-8", "surrogateescape")) > PATH_MAX or "\x00" in symlink_target:
                raise NameTooLong("symlink target too long")
        with self.transaction():
            parent_attr = self._dir(parent)
            existing = self._child(parent, name)
            now = self._now()
            if existing is not None:
                old = self._get(existing)
                if exclusive or kind != FileType.REGULAR:
                    raise AlreadyExists(f"{name!r} exists in {parent}")
                if old.type == FileType.DIRECTORY:
                    raise IsADirectory(f"{name!r} is a directory")
                if old.type != FileType.REGULAR:
                    raise AlreadyExists(f"{name!r} exists in {parent} and is not a regular file")
                if truncate and old.size:
                    self._truncate_blocks(existing, 0, old.block_size or self.block_size)
                    self._db.execute("UPDATE inodes SET size=0, mtime_ns=?, ctime_ns=? WHERE ino=?",
                                     (now, now, existing))
                    return self._get(existing)
                return old
            perm = mode & 0o7777
            if parent_attr.mode & 0o2000:   # setgid directory: group inherited, dirs stay setgid
                gid = parent_attr.gid
                if kind == FileType.DIRECTORY:
                    perm |= 0o2000
            if kind == FileType.REGULAR:
                block_size = self._effective(parent)[0].block_size or self.block_size
            else:
                block_size = self.block_size
            target = symlink_target if kind == FileType.SYMLINK else None
            size = len(symlink_target.encode("utf-8", "surrogateescape")) if target is not None else 0
            nlink = 2 if kind == FileType.DIRECTORY else 1
            rdev = rdev if kind in (FileType.CHARDEV, FileType.BLOCKDEV) else 0
            cursor = self._db.execute(
                "INSERT INTO inodes (type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev,"
                " block_size, target, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (int(kind), perm, uid, gid, size, nlink, now, now, now, rdev, block_size, target, parent))
            ino = int(cursor.lastrowid or 0)
            self._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)", (parent, name, ino))
            if kind == FileType.DIRECTORY:
                self._add_nlink(parent, 1)
            self._touch_dir(parent, now)
            return self._get(ino)

    def mkdir(self, parent: int, name: str, mode: int = 0o755, *, uid: int = 0, gid: int = 0) -> Attr:
        return self.create(parent, name, FileType.DIRECTORY, mode, uid=uid, gid=gid)

    def setattr(self, ino: int, changes: SetAttrChanges) -> Attr:
        with self.transaction():
            attr = self._get(ino)
            now = self._now()
            sets: list[str] = []
            args: list[int] = []
            if changes.size is not None and changes.size != attr.size:
                if attr.type != FileType.REGULAR:
                    raise _type_error(attr.type, "regular file")
                if not 0 <= changes.size <= MAX_ID:
                    raise InvalidArgument(f"size {changes.size} out of range")
                if changes.size < attr.size:
                    self._truncate_blocks(ino, changes.size, attr.block_size or self.block_size)
                sets += ["size=?", "mtime_ns=?"]
                args += [changes.size, now]
            elif changes.size is not None and attr.type == FileType.DIRECTORY:
                raise IsADirectory(f"inode {ino} is a directory")
            if changes.mode is not None:
                sets.append("mode=?")
                args.append(changes.mode & 0o7777)
            if changes.uid is not None:
                sets.append("uid=?")
                args.append(changes.uid)
            if changes.gid is not None:
                sets.append("gid=?")
                args.append(changes.gid)
            if changes.atime_now or changes.atime_ns is not None:
                sets.append("atime_ns=?")
                args.append(now if changes.atime_now else int(changes.atime_ns or 0))
            if changes.mtime_now or changes.mtime_ns is not None:
                sets.append("mtime_ns=?")
                args.append(now if changes.mtime_now else int(changes.mtime_ns or 0))
            sets.append("ctime_ns=?")
            args.append(changes.ctime_ns if changes.ctime_ns is not None else now)
            self._db.execute(f"UPDATE inodes SET {', '.join(sets)} WHERE ino=?", (*args, ino))
            return self._get(ino)

    def link(self, ino: int, new_parent: int, new_name: str) -> Attr:
        validate_name(new_name)
        with self.transaction():
            attr = self._get(ino)
            if attr.type == FileType.DIRECTORY:
                raise NotPermitted("hard links to directories are not allowed")
            if attr.nlink == 0:
                raise NotFound(f"inode {ino} has been unlinked")
            self._dir(new_parent)
            if self._child(new_parent, new_name) is not None:
                raise AlreadyExists(f"{new_name!r} exists in {new_parent}")
            now = self._now()
            self._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                             (new_parent, new_name, ino))
            self._db.execute("UPDATE inodes SET nlink = nlink + 1, ctime_ns=? WHERE ino=?", (now, ino))
            self._touch_dir(new_parent, now)
            return self._get(ino)

    def unlink(self, parent: int, name: str, *, directory: bool = False,
               keep_orphan: bool = False, keeper: str = "") -> UnlinkResult:
        """unlink(2) or, with `directory`, rmdir(2). A file whose last name goes is freed with its
        blocks, or kept as an orphan (`keep_orphan`: still open) until `release_orphan`; `keeper` is
        the client session keeping it (its orphans are released when it dies: master/sessions.py)."""
        validate_name(name)
        with self.transaction():
            self._dir(parent)
            ino = self._child(parent, name)
            if ino is None:
                raise NotFound(f"{name!r} not found in {parent}")
            kind = self._type_of(ino)
            now = self._now()
            if directory:
                if kind != FileType.DIRECTORY:
                    raise NotADirectory(f"{name!r} is not a directory")
                if self._db.execute("SELECT 1 FROM dentries WHERE parent=? LIMIT 1", (ino,)).fetchone():
                    raise DirectoryNotEmpty(f"{name!r} is not empty")
                self._db.execute("DELETE FROM dentries WHERE parent=? AND name=?", (parent, name))
                self._add_nlink(parent, -1)
                self._touch_dir(parent, now)
                self._free_inode(ino)
                return UnlinkResult(ino, 0)
            if kind == FileType.DIRECTORY:
                raise IsADirectory(f"{name!r} is a directory")
            self._db.execute("DELETE FROM dentries WHERE parent=? AND name=?", (parent, name))
            row = self._db.execute("UPDATE inodes SET nlink = nlink - 1, ctime_ns=? WHERE ino=? "
                                   "RETURNING nlink", (now, ino)).fetchone()
            nlink = max(0, int(row[0]))
            self._touch_dir(parent, now)
            self._unlinked_from(ino, nlink, keep_orphan, keeper)
            return UnlinkResult(ino, nlink)

    def release_orphan(self, ino: int) -> None:
        """The last open handle of an unlinked file closed on the client that kept it: free it (after
        the unlink grace, for readers elsewhere). Idempotent."""
        with self.transaction():
            if not 0 < ino <= MAX_ID:
                return
            row = self._db.execute("SELECT nlink, orphan FROM inodes WHERE ino=?", (ino,)).fetchone()
            if row is not None and int(row[0]) <= 0 and int(row[1]) == 1:
                self._db.execute("DELETE FROM orphan_keepers WHERE ino=?", (ino,))
                self._free_later(ino)

    def rename(self, parent: int, name: str, new_parent: int, new_name: str,
               flags: int = 0, keep_orphan: bool = False, keeper: str = "") -> RenameResult:
        """rename(2)/renameat2(2) as one transaction. A replaced file left without names is freed,
        or kept as an orphan (`keep_orphan`: still open) until `release_orphan`, as in `unlink`."""
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
            raise InvalidArgument(f"bad rename flags {flags:#x}")
        validate_name(name)
        validate_name(new_name)
        with self.transaction():
            self._dir(parent)
            self._dir(new_parent)
            src = self._child(parent, name)
            if src is None:
                raise NotFound(f"{name!r} not found in {parent}")
            dst = self._child(new_parent, new_name)
            if parent == new_parent and name == new_name:
                if flags & RENAME_NOREPLACE:
                    raise AlreadyExists(f"{new_name!r} exists")
                return RenameResult()
            src_kind = self._type_of(src)
            now = self._now()
            if flags & RENAME_EXCHANGE:
                if dst is None:
                    raise NotFound(f"{new_name!r} not found in {new_parent} (RENAME_EXCHANGE)")
                self._exchange(parent, name, src, src_kind, new_parent, new_name, dst, now)
                return RenameResult()
            if dst is not None and flags & RENAME_NOREPLACE:
                raise AlreadyExists(f"{new_name!r} exists in {new_parent}")
            if dst == src:
                return RenameResult()   # two names of one inode: POSIX says do nothing
            if src_kind == FileType.DIRECTORY and self._is_same_or_descendant(new_parent, src):
                raise InvalidArgument("cannot move a directory into its own subtree")
            result = RenameResult()
            if dst is not None:
                dst_kind = self._type_of(dst)
                if src_kind == FileType.DIRECTORY and dst_kind != FileType.DIRECTORY:
                    raise NotADirectory(f"{new_name!r} is not a directory")
                if src_kind != FileType.DIRECTORY and dst_kind == FileType.DIRECTORY:
                    raise IsADirectory(f"{new_name!r} is a directory")
                self._db.execute("DELETE FROM dentries WHERE parent=? AND name=?", (new_parent, new_name))
                if dst_kind == FileType.DIRECTORY:
                    if self._db.execute("SELECT 1 FROM dentries WHERE parent=? LIMIT 1", (dst,)).fetchone():
                        raise DirectoryNotEmpty(f"{new_name!r} is not empty")
                    self._add_nlink(new_parent, -1)
                    self._free_inode(dst)
                    result = RenameResult(dst, 0)
                else:
                    row = self._db.execute("UPDATE inodes SET nlink = nlink - 1, ctime_ns=? WHERE ino=? "
                                           "RETURNING nlink", (now, dst)).fetchone()
                    nlink = max(0, int(row[0]))
                    self._unlinked_from(dst, nlink, keep_orphan, keeper)
                    result = RenameResult(dst, nlink)
            self._db.execute("DELETE FROM dentries WHERE parent=? AND name=?", (parent, name))
            self._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                             (new_parent, new_name, src))
            if src_kind == FileType.DIRECTORY and parent != new_parent:
                self._add_nlink(parent, -1)
                self._add_nlink(new_parent, 1)
            self._db.execute("UPDATE inodes SET parent=?, ctime_ns=? WHERE ino=?", (new_parent, now, src))
            self._touch_dir(parent, now)
            self._touch_dir(new_parent, now)
            return result

    def _exchange(self, parent: int, name: str, src: int, src_kind: FileType, new_parent: int,
                  new_name: str, dst: int, now: int) -> None:
        if src == dst:
            return
        dst_kind = self._type_of(dst)
        src_dir = src_kind == FileType.DIRECTORY
        dst_dir = dst_kind == FileType.DIRECTORY
        if src_dir and self._is_same_or_descendant(new_parent, src):
            raise InvalidArgument("cannot move a directory into its own subtree")
        if dst_dir and self._is_same_or_descendant(parent, dst):
            raise InvalidArgument("cannot move a directory into its own subtree")
        self._db.execute("UPDATE dentries SET ino=? WHERE parent=? AND name=?", (dst, parent, name))
        self._db.execute("UPDATE dentries SET ino=? WHERE parent=? AND name=?", (src, new_parent, new_name))
        if parent != new_parent and src_dir != dst_dir:
            moved_dir_to_new = 1 if src_dir else -1
            self._add_nlink(parent, -moved_dir_to_new)
            self._add_nlink(new_parent, moved_dir_to_new)
        self._db.execute("UPDATE inodes SET parent=?, ctime_ns=? WHERE ino=?", (new_parent, now, src))
        self._db.execute("UPDATE inodes SET parent=?, ctime_ns=? WHERE ino=?", (parent, now, dst))
        self._touch_dir(parent, now)
        self._touch_dir(new_parent, now)

    # ------------------------------------------------------------------ xattrs

    @staticmethod
    def _check_xattr_name(name: str) -> None:
        size = len(name.encode("utf-8", "surrogateescape"))
        if size == 0:
            raise InvalidArgument("empty xattr name", errno=errno.ERANGE)
        if size > XATTR_NAME_MAX:
            raise InvalidArgument(f"xattr name longer than {XATTR_NAME_MAX} bytes", errno=errno.ERANGE)

    def getxattr(self, ino: int, name: str) -> bytes:
        self._check_xattr_name(name)
        self._row(ino)
        row = self._db.execute("SELECT value FROM xattrs WHERE ino=? AND name=?", (ino, name)).fetchone()
        if row is None:
            raise NoData(f"no xattr {name!r} on inode {ino}")
        return bytes(row[0])

    def setxattr(self, ino: int, name: str, value: bytes, flags: int = 0) -> None:
        self._check_xattr_name(name)
        if len(value) > XATTR_VALUE_MAX:
            raise InvalidArgument(f"xattr value larger than {XATTR_VALUE_MAX} bytes", errno=errno.E2BIG)
        if flags & ~(XATTR_CREATE | XATTR_REPLACE) or flags == XATTR_CREATE | XATTR_REPLACE:
            raise InvalidArgument(f"bad xattr flags {flags:#x}")
        with self.transaction():
            self._row(ino)
            present = self._db.execute("SELECT 1 FROM xattrs WHERE ino=? AND name=?",
                                       (ino, name)).fetchone() is not None
            if flags & XATTR_CREATE and present:
                raise AlreadyExists(f"xattr {name!r} exists")
            if flags & XATTR_REPLACE and not present:
                raise NoData(f"no xattr {name!r} on inode {ino}")
            self._db.execute("INSERT OR REPLACE INTO xattrs (ino, name, value) VALUES (?, ?, ?)",
                             (ino, name, bytes(value)))
            self._db.execute("UPDATE inodes SET ctime_ns=? WHERE ino=?", (self._now(), ino))

    def listxattr(self, ino: int) -> list[str]:
        self._row(ino)
        return [row[0] for row in self._db.execute("SELECT name FROM xattrs WHERE ino=? ORDER BY name",
                                                   (ino,))]

    def removexattr(self, ino: int, name: str) -> None:
        self._check_xattr_name(name)
        with self.transaction():
            self._row(ino)
            cursor = self._db.execute("DELETE FROM xattrs WHERE ino=? AND name=?", (ino, name))
            if cursor.rowcount == 0:
                raise NoData(f"no xattr {name!r} on inode {ino}")
            self._db.execute("UPDATE inodes SET ctime_ns=? WHERE ino=?", (self._now(), ino))

    # ------------------------------------------------------------------ policy

    def _effective(self, dir_ino: int) -> tuple[Policy, int]:
        """The policy in force in directory `dir_ino`: the nearest ancestor's policy; a class left
        UNSPECIFIED there comes from further up. Returns (resolved policy, defining inode)."""
        found: Policy | None = None
        where = ROOT_INO
        current = dir_ino
        storage_class = StorageClass.UNSPECIFIED
        for _ in range(1 << 16):
            row = self._db.execute(
                "SELECT parent, p_class, p_replicas, p_ttl_ms, p_block_size, p_placement, p_compress "
                "FROM inodes WHERE ino=?", (current,)).fetchone()
            if row is None:     # an orphan's directory is gone: the root decides
                current = ROOT_INO
                continue
            if row[1] is not None:
                if found is None:
                    found = Policy(StorageClass(row[1]), row[2], row[3], row[4], row[5], bool(row[6]))
                    where = current
                if row[1] != StorageClass.UNSPECIFIED:
                    storage_class = StorageClass(row[1])
                    break
            if current == ROOT_INO:
                break
            current = int(row[0])
        if found is None:
            found = Policy()
        return Policy(
            storage_class=storage_class if storage_class != StorageClass.UNSPECIFIED else self.root_class,
            replicas=found.replicas,
            ttl_ms=found.ttl_ms,
            block_size=found.block_size or self.block_size,
            placement=found.placement or PLACEMENT_HASH,
            compress=found.compress,
        ), where

    def _policy_dir(self, ino: int) -> int:
        """The directory whose policy governs inode `ino` (itself for a directory)."""
        row = self._db.execute("SELECT type, parent FROM inodes WHERE ino=?", (ino,)).fetchone()
        if row is None:
            raise NotFound(f"no inode {ino}")
        return ino if FileType(row[0]) == FileType.DIRECTORY else int(row[1]) or ROOT_INO

    def effective_policy(self, ino: int) -> Policy:
        return self._effective(self._policy_dir(ino))[0]

    def get_policy(self, path: str) -> PolicyAt:
        ino = self._policy_dir(self._resolve(path, True))
        policy, where = self._effective(ino)
        return PolicyAt(policy, self._path_of(where) or "/")

    def set_policy(self, path: str, policy: Policy) -> PolicyAt:
        """Replaces the directory's own policy. An all-default policy clears it (inherit again),
        except on the root, which always keeps a class (the configured default when cleared)."""
        if policy.placement not in ("", PLACEMENT_HASH, PLACEMENT_LOCAL):
            raise InvalidArgument(f"unknown placement {policy.placement!r} (hash or local)")
        if not 0 <= policy.replicas <= MAX_REPLICAS:
            raise InvalidArgument(f"replicas must be 0..{MAX_REPLICAS}")
        if policy.block_size and not MIN_BLOCK_SIZE <= policy.block_size <= MAX_BLOCK_SIZE:
            raise InvalidArgument(f"block_size must be 0 or {MIN_BLOCK_SIZE}..{MAX_BLOCK_SIZE}")
        if policy.block_size % MIN_BLOCK_SIZE:
            raise InvalidArgument(f"block_size must be a multiple of {MIN_BLOCK_SIZE}")
        if not 0 <= policy.ttl_ms <= MAX_ID:
            raise InvalidArgument("ttl_ms out of range")
        try:
            storage_class = StorageClass(policy.storage_class)
        except ValueError:
            raise InvalidArgument(f"unknown storage class {policy.storage_class}") from None
        with self.transaction():
            ino = self._resolve(path, True)
            self._dir(ino)
            if policy == Policy() and ino != ROOT_INO:
                self._db.execute("UPDATE inodes SET p_class=NULL, p_replicas=NULL, p_ttl_ms=NULL, "
                                 "p_block_size=NULL, p_placement=NULL, p_compress=NULL WHERE ino=?", (ino,))
            else:
                if ino == ROOT_INO and storage_class == StorageClass.UNSPECIFIED:
                    storage_class = self.root_class
                self._db.execute(
                    "UPDATE inodes SET p_class=?, p_replicas=?, p_ttl_ms=?, p_block_size=?, p_placement=?,"
                    " p_compress=?, ctime_ns=? WHERE ino=?",
                    (int(storage_class), policy.replicas, policy.ttl_ms, policy.block_size,
                     policy.placement, int(policy.compress), self._now(), ino))
            effective, where = self._effective(ino)
            return PolicyAt(effective, self._path_of(where) or "/")

    # ------------------------------------------------------------------ blocks

    def _regular(self, ino: int) -> Attr:
        attr = self._get(ino)
        if attr.type != FileType.REGULAR:
            raise _type_error(attr.type, "regular file")
        return attr

    def _locations(self, block_id: int) -> list[str]:
        return [row[0] for row in self._db.execute(
            "SELECT worker_id FROM locations WHERE block_id=? ORDER BY worker_id", (block_id,))]

    def get_blocks(self, ino: int, live: set[str] | None = None) -> FileBlocks:
        """Attr, committed blocks by index, effective policy. With `live`, locations on workers that
        are not live are left out (a reader would only time out on them)."""
        attr = self._regular(ino)
        blocks = []
        for index, block_id, length, checksum in self._db.execute(
                "SELECT idx, block_id, length, checksum FROM blocks WHERE ino=? ORDER BY idx", (ino,)).fetchall():
            workers = self._locations(block_id)
            if live is not None:
                workers = [w for w in workers if w in live]
            blocks.append(BlockInfo(index, block_id, length, _u64_from_db(checksum), tuple(workers)))
        return FileBlocks(attr, tuple(blocks), self.effective_policy(ino))

    def add_block(self, ino: int, index: int, client_node: str, live: Sequence[WorkerInfo]) -> AddedBlock:
        """Allocates a new block id for `index` of a file and chooses the workers to write it to.
        Nothing is visible to readers before `commit_file`."""
        if not 0 <= index < (1 << 32):
            raise InvalidArgument(f"block index {index} out of range")
        with self.transaction():
            attr = self._regular(ino)
            policy = self.effective_policy(ino)
            count = placement.replica_count(policy.storage_class, policy.replicas, len(live),
                                            self.durable_replicas)
            if count == 0:
                raise Unavailable("no live workers to place a block on")
            row = self._db.execute("UPDATE meta SET value = value + 1 WHERE key='next_block_id' "
                                   "RETURNING value - 1").fetchone()
            block_id = int(row[0])
            workers = placement.choose_workers(block_id, live, count, policy.placement, client_node)
            self._db.execute("INSERT INTO open_blocks (block_id, ino, idx, workers, created_ms) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (block_id, ino, index, ",".join(workers), self._now() // 1_000_000))
            return AddedBlock(block_id, tuple(workers), policy.storage_class, policy.ttl_ms,
                              attr.block_size or self.block_size)

    def commit_file(self, ino: int, size: int, blocks: Sequence[BlockInfo] = (),
                    set_mtime: bool = True) -> Attr:
        """Close-to-open: makes the blocks written since open (replacing the same indexes) and the
        size visible. Replaced blocks go to pending deletion on their workers. Re-committing an
        already committed block is a no-op (a retried call)."""
        if not 0 <= size <= MAX_ID:
            raise InvalidArgument(f"size {size} out of range")
        with self.transaction():
            attr = self._regular(ino)
            block_size = attr.block_size or self.block_size
            for block in blocks:
                if block.length > block_size:
                    raise InvalidArgument(f"block {block.block_id} longer than the block size {block_size}")
                if not 0 < block.block_id <= MAX_ID:
                    raise InvalidArgument(f"unknown block {block.block_id}")
                opened = self._db.execute("SELECT ino, idx, workers FROM open_blocks WHERE block_id=?",
                                          (block.block_id,)).fetchone()
                if opened is None:
                    done = self._db.execute("SELECT ino, idx FROM blocks WHERE block_id=?",
                                            (block.block_id,)).fetchone()
                    if done is not None and tuple(done) == (ino, block.index):
                        continue
                    raise InvalidArgument(f"block {block.block_id} was not allocated for inode {ino}")
                if (int(opened[0]), int(opened[1])) != (ino, block.index):
                    raise InvalidArgument(f"block {block.block_id} was allocated for another file/index")
                old = self._db.execute("SELECT block_id FROM blocks WHERE ino=? AND idx=?",
                                       (ino, block.index)).fetchone()
                if old is not None:
                    self._drop_block(int(old[0]))
                self._db.execute("INSERT INTO blocks (ino, idx, block_id, length, checksum, committed_ms) "
                                 "VALUES (?, ?, ?, ?, ?, ?)",
                                 (ino, block.index, block.block_id, block.length, _u64_to_db(block.checksum),
                                  self._now() // 1_000_000))
                workers = block.worker_ids or tuple(w for w in str(opened[2]).split(",") if w)
                self._db.executemany("INSERT OR IGNORE INTO locations (block_id, worker_id) VALUES (?, ?)",
                                     [(block.block_id, w) for w in workers])
                self._db.execute("DELETE FROM open_blocks WHERE block_id=?", (block.block_id,))
            if size < attr.size or blocks:
                self._truncate_blocks(ino, size, block_size)
            now = self._now()
            if set_mtime:
                self._db.execute("UPDATE inodes SET size=?, mtime_ns=?, ctime_ns=? WHERE ino=?",
                                 (size, now, now, ino))
            elif size != attr.size:
                self._db.execute("UPDATE inodes SET size=?, ctime_ns=? WHERE ino=?", (size, now, ino))
            return self._get(ino)

    def expire_open_blocks(self, max_age_ms: int) -> int:
        """Blocks allocated but never committed (the writer died) are given up after `max_age_ms`."""
        with self.transaction():
            cutoff = self._now() // 1_000_000 - max_age_ms
            rows = self._db.execute("SELECT block_id, workers FROM open_blocks WHERE created_ms < ?",
                                    (cutoff,)).fetchall()
            for block_id, workers in rows:
                self._drop_open_block(int(block_id), workers)
            return len(rows)

    # ------------------------------------------------------------------ block reports (membership)

    def reconcile_blocks(self, worker_id: str, block_ids: Iterable[int]) -> list[int]:
        """A worker's full block report at registration. Known blocks get this worker as a location,
        locations the worker no longer has are dropped (not those committed in the last
        REPORT_GRACE_MS: the report may predate them), and the ids to delete on it are returned:
        the unknown ones. Its pending deletions are cleared: a freed block it still has is unknown
        now, so it is in the answer anyway."""
        reported = sorted({b for b in block_ids})
        with self.transaction():
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS reported (block_id INTEGER PRIMARY KEY)")
            self._db.execute("DELETE FROM temp.reported")
            self._db.executemany("INSERT INTO temp.reported (block_id) VALUES (?)",
                                 [(b,) for b in reported if 0 < b <= MAX_ID])
            unknown = [b for b in reported if not 0 < b <= MAX_ID]
            unknown += [row[0] for row in self._db.execute(
                "SELECT r.block_id FROM temp.reported r WHERE NOT EXISTS "
                "(SELECT 1 FROM blocks b WHERE b.block_id = r.block_id) AND NOT EXISTS "
                "(SELECT 1 FROM open_blocks o WHERE o.block_id = r.block_id)")]
            # A location the worker does not report is gone, unless the block was committed so
            # recently that the report may have been taken before the block was stored.
            self._db.execute("DELETE FROM locations WHERE worker_id=? AND block_id NOT IN "
                             "(SELECT block_id FROM temp.reported) AND block_id NOT IN "
                             "(SELECT block_id FROM blocks WHERE committed_ms > ?)",
                             (worker_id, self._now() // 1_000_000 - REPORT_GRACE_MS))
            self._db.execute("INSERT OR IGNORE INTO locations (block_id, worker_id) "
                             "SELECT r.block_id, ? FROM temp.reported r JOIN blocks b ON b.block_id = r.block_id",
                             (worker_id,))
            # A freed block this worker reports is already in `unknown`; the rest of its pending
            # deletions are blocks it does not have any more: nothing to do for those.
            self._db.execute("DELETE FROM deletions WHERE worker_id=?", (worker_id,))
            self._db.execute("DELETE FROM temp.reported")
            return sorted(set(unknown))

    def take_deletions(self, worker_id: str, limit: int = 100_000) -> list[int]:
        """Pending deletions for a worker, removed as they are handed out (a lost reply only leaks
        until the worker's next registration, whose reconcile finds them unknown)."""
        with self.transaction():
            ids = [int(r[0]) for r in self._db.execute(
                "SELECT block_id FROM deletions WHERE worker_id=? ORDER BY block_id LIMIT ?",
                (worker_id, limit)).fetchall()]
            for chunk in _chunks(ids):
                self._db.execute(f"DELETE FROM deletions WHERE worker_id=? AND block_id IN "
                                 f"({','.join('?' * len(chunk))})", (worker_id, *chunk))
            return ids

    def drop_locations(self, worker_id: str, block_ids: Iterable[int], *, unlink_cache: bool) -> Evicted:
        """A worker evicted (or found bad) these blocks. With `unlink_cache`, a file in a cache-class
        directory that is left with a block without any copy is unlinked (all its names) and freed,
        so a reader sees a clean miss instead of an I/O error."""
        ids = sorted({b for b in block_ids if 0 < b <= MAX_ID})
        if not ids:
            return Evicted()
        with self.transaction():
            removed = 0
            orphaned: set[int] = set()
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                removed += self._db.execute(f"DELETE FROM locations WHERE worker_id=? AND block_id IN ({marks})",
                                            (worker_id, *chunk)).rowcount
                if unlink_cache:
                    orphaned.update(int(r[0]) for r in self._db.execute(
                        f"SELECT b.ino FROM blocks b WHERE b.block_id IN ({marks}) AND NOT EXISTS "
                        "(SELECT 1 FROM locations l WHERE l.block_id = b.block_id)", chunk))
            class_of_dir: dict[int, StorageClass] = {}
            unlinked = []
            for ino in sorted(orphaned):
                directory = self._policy_dir(ino)
                if directory not in class_of_dir:
                    class_of_dir[directory] = self._effective(directory)[0].storage_class
                if class_of_dir[directory] == StorageClass.CACHE:
                    self._unlink_everywhere(ino)
                    unlinked.append(ino)
            return Evicted(removed, tuple(unlinked))

    def _unlink_everywhere(self, ino: int) -> None:
        now = self._now()
        parents = [int(r[0]) for r in self._db.execute("SELECT parent FROM dentries WHERE ino=?", (ino,))]
        self._db.execute("DELETE FROM dentries WHERE ino=?", (ino,))
        for parent in set(parents):
            self._touch_dir(parent, now)
        self._free_inode(ino)

    # ------------------------------------------------------------------ workers rows (membership)

    def load_workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                           bool(row[9]), row[10], row[11], row[12], row[13])
                for row in self._db.execute(f"SELECT {_WORKER_COLS} FROM workers ORDER BY worker_id")]

    def save_worker(self, w: WorkerInfo) -> None:
        """Call inside a transaction."""
        self._db.execute(
            f"INSERT OR REPLACE INTO workers ({_WORKER_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (w.worker_id, w.host, w.port, w.unix_socket, w.node, min(w.capacity, MAX_ID), min(w.used, MAX_ID),
             min(w.available, MAX_ID), w.lm_port, int(w.live), w.last_heartbeat_ms, min(w.blocks, MAX_ID),
             min(w.objects, MAX_ID), min(w.evictions, MAX_ID)))

    # ------------------------------------------------------------------ totals

    def counts(self) -> NamespaceCounts:
        files, dirs, inodes = self._db.execute(
            "SELECT COALESCE(SUM(type=1), 0), COALESCE(SUM(type=2), 0), COUNT(*) FROM inodes").fetchone()
        blocks = self._db.execute("SELECT COUNT(*) FROM blocks").fetchone()[0]
        return NamespaceCounts(int(files), int(dirs), int(blocks), int(inodes))

    def inode_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM inodes").fetchone()[0])

    def statfs(self, live: Sequence[WorkerInfo], inodes: int | None = None) -> StatFs:
        """`inodes`: the count, when the caller took it elsewhere (see Membership.report)."""
        inodes = inodes if inodes is not None else self.inode_count()
        return StatFs(capacity=sum(w.capacity for w in live), used=sum(w.used for w in live),
                      available=sum(w.available for w in live), files=inodes, block_size=self.block_size)

    def pending_deletions(self, worker_id: str) -> list[int]:
        """For tests and fsck: what would be handed to the worker (without taking it)."""
        return [int(r[0]) for r in self._db.execute(
            "SELECT block_id FROM deletions WHERE worker_id=? ORDER BY block_id", (worker_id,))]

    def check(self) -> list[str]:
        """Consistency check (fsck of the namespace): returns the problems found, [] when sound."""
        problems: list[str] = []
        q = self._db.execute
        for (ino,) in q("SELECT DISTINCT d.ino FROM dentries d LEFT JOIN inodes i ON i.ino = d.ino "
                        "WHERE i.ino IS NULL"):
            problems.append(f"dentry points to missing inode {ino}")
        for (parent,) in q("SELECT DISTINCT d.parent FROM dentries d LEFT JOIN inodes i ON i.ino = d.parent "
                           "WHERE i.ino IS NULL OR i.type != 2"):
            problems.append(f"dentry under missing or non-directory inode {parent}")
        for ino, nlink in q("SELECT i.ino, i.nlink FROM inodes i WHERE i.type != 2 AND i.nlink != "
                            "(SELECT COUNT(*) FROM dentries d WHERE d.ino = i.ino)"):
            problems.append(f"inode {ino}: nlink {nlink} does not match its names")
        for ino, nlink in q("SELECT i.ino, i.nlink FROM inodes i WHERE i.type = 2 AND i.nlink != 2 + "
                            "(SELECT COUNT(*) FROM dentries d JOIN inodes c ON c.ino = d.ino "
                            "WHERE d.parent = i.ino AND c.type = 2)"):
            problems.append(f"directory {ino}: nlink {nlink} does not match its subdirectories")
        for ino, count in q("SELECT d.ino, COUNT(*) FROM dentries d JOIN inodes i ON i.ino = d.ino "
                            "WHERE i.type = 2 GROUP BY d.ino HAVING COUNT(*) > 1"):
            problems.append(f"directory {ino} has {count} names")
        for (ino,) in q("SELECT i.ino FROM inodes i WHERE i.ino != 1 AND i.orphan = 0 AND NOT EXISTS "
                        "(SELECT 1 FROM dentries d WHERE d.ino = i.ino)"):
            problems.append(f"inode {ino} is unreachable and not an orphan")
        for (ino,) in q("SELECT i.ino FROM inodes i WHERE i.type = 2 AND i.ino != 1 AND NOT EXISTS "
                        "(SELECT 1 FROM dentries d WHERE d.ino = i.ino AND d.parent = i.parent)"):
            problems.append(f"directory {ino}: parent column does not match its dentry")
        for (block_id,) in q("SELECT b.block_id FROM blocks b LEFT JOIN inodes i ON i.ino = b.ino "
                             "WHERE i.ino IS NULL"):
            problems.append(f"block {block_id} of a missing inode")
        for (block_id,) in q("SELECT l.block_id FROM locations l WHERE NOT EXISTS "
                             "(SELECT 1 FROM blocks b WHERE b.block_id = l.block_id)"):
            problems.append(f"location of unknown block {block_id}")
        for (ino,) in q("SELECT DISTINCT x.ino FROM xattrs x LEFT JOIN inodes i ON i.ino = x.ino "
                        "WHERE i.ino IS NULL"):
            problems.append(f"xattrs of missing inode {ino}")
        return problems
