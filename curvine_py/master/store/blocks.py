"""File blocks: allocation (AddBlock chooses the workers), the close-to-open commit, locations, and
the expiry of blocks allocated but never committed.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from curvine_py.core.domain import BlockId
from curvine_py.core.errors import (
    InvalidArgument,
    NotFound,
    Unavailable,
)
from curvine_py.master import placement
from curvine_py.master.store.db import MAX_ID, _u64_from_db, _u64_to_db
from curvine_py.master.store.inodes import _ATTR_COLS_I, VISIBLE, _attr, _type_error, check_ino
from curvine_py.master.store.policy import Policies, governing_dir
from curvine_py.master.store.quotas import Quotas, new_charges
from curvine_py.master.types import (
    AddedBlock,
    Attr,
    BlockInfo,
    FileBlocks,
    FileType,
    WorkerInfo,
)

log = logging.getLogger(__name__)

# Uncommitted blocks kept per (file, block index); see Blocks._bound_open_blocks. Why 8: one handle
# needs one (plus one in flight with write-behind); several handles of one file writing the same
# block before any of them commits are rare, and the excess only ever costs the oldest rewrite.
MAX_OPEN_BLOCKS_PER_INDEX = 8

# A file's inode (visible: not in its unlink grace, see inodes.VISIBLE), its parent, and one row per (block, location), blocks by index and each block's workers in order; a
# file without blocks gives the inode's row alone, with NULLs after it.
_FILE_BLOCKS = (f"SELECT {_ATTR_COLS_I}, i.parent, b.idx, b.block_id, b.length, b.checksum, l.worker_id "
                "FROM inodes i LEFT JOIN blocks b ON b.ino = i.ino LEFT JOIN locations l ON l.block_id = b.block_id "
                f"WHERE i.ino = ? AND i.{VISIBLE} ORDER BY b.idx, l.worker_id")
_PARENT_AT = _ATTR_COLS_I.count(",") + 1
_BLOCK_AT = _PARENT_AT + 1


class Blocks(Policies, Quotas):
    """Block allocation and commit."""

    def get_blocks(self, ino: int, live: set[str] | None = None) -> FileBlocks:
        """Attr, committed blocks by index, effective policy. With `live`, locations on workers that
        are not live are left out (a reader would only time out on them).

        Two statements whatever the file's size: the inode with its blocks and their locations in
        one join (every open of a file asks for this: issue 14 measured the statement per block it
        replaces), then the policy chain of its directory (policy.py)."""
        check_ino(ino)
        rows = self._db.execute(_FILE_BLOCKS, (ino,)).fetchall()
        if not rows:
            raise NotFound(f"no inode {ino}")      # or in its unlink grace, as _row says
        attr = _attr(rows[0])
        if attr.type != FileType.REGULAR:
            raise _type_error(attr.type, "regular file")
        found: dict[int, tuple[Sequence[int], list[str]]] = {}    # block id -> (its row, its workers), by index
        for row in rows:
            block_id, worker = row[_BLOCK_AT + 1], row[-1]
            if block_id is None:                   # a file without blocks: the one row of its inode
                break
            workers = found.setdefault(block_id, (row, []))[1]
            if worker is not None and (live is None or worker in live):
                workers.append(worker)
        blocks = tuple(BlockInfo(row[_BLOCK_AT], BlockId(block_id), row[_BLOCK_AT + 2], _u64_from_db(row[_BLOCK_AT + 3]),
                                 tuple(workers)) for block_id, (row, workers) in found.items())
        policy = self._effective(governing_dir(ino, attr.type, int(rows[0][_PARENT_AT])))[0]
        return FileBlocks(attr, blocks, policy)

    def add_block(self, ino: int, index: int, client_node: str, live: Sequence[WorkerInfo]) -> AddedBlock:
        """Allocates a new block id for `index` of a file and chooses the workers to write it to.
        Nothing is visible to readers before `commit_file`."""
        if not 0 <= index < (1 << 32):
            raise InvalidArgument(f"block index {index} out of range")
        with self.transaction():
            attr = self._regular(ino)
            policy = self.effective_policy(ino)
            # A block at `index` makes the file at least index * block_size + 1 bytes long: refuse it
            # now when that alone breaks a quota (CommitFile judges the exact size).
            growth = index * (attr.block_size or self.block_size) + 1 - attr.size
            if growth > 0:
                charges = new_charges()
                self._charge_names(charges, ino, growth)
                self._charge(charges, apply=False)
            count = placement.replica_count(policy.storage_class, policy.replicas, len(live),
                                            self.durable_replicas)
            if count == 0:
                raise Unavailable("no live workers to place a block on")
            self._bound_open_blocks(ino, index)
            # CAST: meta.value is untyped on SQLite and TEXT on PostgreSQL.
            row = self._db.execute("UPDATE meta SET value = CAST(value AS BIGINT) + 1 WHERE key='next_block_id' "
                                   "RETURNING CAST(value AS BIGINT) - 1").fetchone()
            block_id = BlockId(int(row[0]))
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
                self._db.executemany("INSERT INTO locations (block_id, worker_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                     [(block.block_id, w) for w in workers])
                self._db.execute("DELETE FROM open_blocks WHERE block_id=?", (block.block_id,))
            charges = new_charges()
            self._charge_names(charges, ino, size - attr.size)
            self._charge(charges)
            if blocks:
                self.replica_changes += 1     # a block may be committed with fewer copies than wanted
            if size < attr.size or blocks:
                self._truncate_blocks(ino, size, block_size)
            now = self._now()
            if set_mtime:
                self._db.execute("UPDATE inodes SET size=?, mtime_ns=?, ctime_ns=? WHERE ino=?",
                                 (size, now, now, ino))
            elif size != attr.size:
                self._db.execute("UPDATE inodes SET size=?, ctime_ns=? WHERE ino=?", (size, now, ino))
            return self._get(ino)

    def abandon_blocks(self, ino: int, block_ids: Sequence[int]) -> int:
        """Gives up blocks a writer allocated for `ino` and will never commit (superseded by a
        rewrite before its commit, or written by a handle that failed): they are freed on their
        workers now instead of at the open-block expiry. Ids that are not open blocks of `ino`
        (committed, already given up, another file's) are ignored, so a retried call is harmless.
        Returns how many were given up."""
        given_up = 0
        with self.transaction():
            for block_id in block_ids:
                if not 0 < block_id <= MAX_ID:
                    continue
                row = self._db.execute("SELECT workers FROM open_blocks WHERE block_id=? AND ino=?",
                                       (block_id, ino)).fetchone()
                if row is not None:
                    self._drop_open_block(block_id, str(row[0]))
                    given_up += 1
        return given_up

    def _bound_open_blocks(self, ino: int, index: int) -> None:
        """At most MAX_OPEN_BLOCKS_PER_INDEX uncommitted blocks per (file, index): a writer that
        rewrites a block again and again without committing (mmap or direct-I/O rewrites of a file
        kept open) and does not give up what it replaced would otherwise fill the disks (issue 11,
        item 9). The oldest are freed; a commit that still names one fails with InvalidArgument,
        so a file never reads as something it was not."""
        rows = self._db.execute("SELECT block_id, workers FROM open_blocks WHERE ino=? AND idx=? "
                                "ORDER BY block_id", (ino, index)).fetchall()
        excess = len(rows) - (MAX_OPEN_BLOCKS_PER_INDEX - 1)
        for block_id, workers in rows[:max(0, excess)]:
            log.warning("inode %d block %d: more than %d uncommitted rewrites, freeing block %x",
                        ino, index, MAX_OPEN_BLOCKS_PER_INDEX, int(block_id))
            self._drop_open_block(int(block_id), str(workers))

    def expire_open_blocks(self, max_age_ms: int) -> int:
        """Blocks allocated but never committed (the writer died) are given up after `max_age_ms`."""
        with self.transaction():
            cutoff = self._now() // 1_000_000 - max_age_ms
            rows = self._db.execute("SELECT block_id, workers FROM open_blocks WHERE created_ms < ?",
                                    (cutoff,)).fetchall()
            for block_id, workers in rows:
                self._drop_open_block(int(block_id), workers)
            return len(rows)
