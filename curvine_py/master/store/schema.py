"""The master database's schema (SQLite DDL) and its versions.

`_SCHEMA` is version 1; `MIGRATIONS[n]` takes a database from version n-1 to n. The version a
database is at is kept in it (meta.schema_version); opening an older one applies the missing
migrations in one transaction, a newer one is refused. On PostgreSQL a version may also install
server-side functions (`pgfuncs.PG_MIGRATIONS[n]`, run after `MIGRATIONS[n]`). The same scripts build a PostgreSQL
database through `to_postgresql` (64-bit integers, BYTEA, an identity column for the inode
numbers, bytewise "C" collation for names so readdir's order is the same on both engines).
"""
from __future__ import annotations

import re

SCHEMA_VERSION = 4

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

MIGRATIONS: dict[int, str] = {
    # Directory quotas: the limits (0 = unlimited) and the usage of the directory's subtree, kept
    # up to date by every mutation (master/store/quotas.py).
    2: """
CREATE TABLE IF NOT EXISTS quotas (
    ino INTEGER PRIMARY KEY,
    max_bytes INTEGER NOT NULL,
    max_inodes INTEGER NOT NULL,
    used_bytes INTEGER NOT NULL,
    used_inodes INTEGER NOT NULL
);
""",
    # Stored bytes of a regular file (the sum of its committed blocks' lengths: st_blocks), kept
    # by commit and truncate (Inodes._recount_stored) so a getattr reads it from the inode row.
    3: """
ALTER TABLE inodes ADD COLUMN stored INTEGER NOT NULL DEFAULT 0;
UPDATE inodes SET stored = (SELECT COALESCE(SUM(b.length), 0) FROM blocks b WHERE b.ino = inodes.ino)
    WHERE type = 1;
""",
    # PostgreSQL's server-side functions (store/pgfuncs.py PG_MIGRATIONS[4]): nothing for SQLite.
    4: "",
}


_PG_REWRITES = (
    (re.compile(r"\bino INTEGER PRIMARY KEY AUTOINCREMENT\b"), "ino BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bvalue ANY\b"), "value TEXT"),             # meta values: numbers read back with int()
    (re.compile(r"\s+WITHOUT ROWID\b"), ""),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),                   # SQLite's integers are 64-bit
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\b(name|worker_id|key) TEXT\b"), r'\1 TEXT COLLATE "C"'),
)
_SQLITE_ONLY = re.compile(r"\b(AUTOINCREMENT|WITHOUT ROWID|ANY|INTEGER|BLOB)\b")


def to_postgresql(script: str) -> str:
    """The SQLite DDL of this module in PostgreSQL's types. Refuses (at the first open of any
    PostgreSQL store, so in the tests) a script that keeps an SQLite-only word."""
    script = re.sub(r"--[^\n]*", "", script)
    for pattern, replacement in _PG_REWRITES:
        script = pattern.sub(replacement, script)
    left = _SQLITE_ONLY.search(script)
    if left:
        raise AssertionError(f"schema DDL not translatable to PostgreSQL: {left.group(0)!r}")
    return script
