"""Replica accounting for re-replication and repair: which committed blocks have fewer live copies
than their directory's policy wants (under-replicated), none at all (lost), or more (surplus), and
the two changes a repair makes: a new copy recorded, a surplus copy given up.

Only blocks of files that still have a name count (a nameless file in its unlink grace is going
away). The scan is a full pass over the block table: the repairer runs it every few seconds, which
is fine up to a few million blocks; past that, an index of blocks by live-copy count is the step.
"""
from __future__ import annotations

from dataclasses import dataclass

from curvine_py.master import placement
from curvine_py.master.store.db import _u64_from_db
from curvine_py.master.store.policy import Policies
from curvine_py.master.types import StorageClass

LOST_FILES_SHOWN = 100      # paths of files with a lost block listed in a report


@dataclass(frozen=True, slots=True)
class BlockCopies:
    """One committed block and its copies on live workers."""

    block_id: int
    ino: int
    index: int
    length: int
    block_size: int
    holders: tuple[str, ...]      # live workers with a copy
    wanted: int                   # placement.copies_wanted: explicit counts unbounded
    storage_class: StorageClass
    ttl_ms: int
    placement: str
    checksum: int = 0             # the whole block's, recorded at commit (0: unknown, after a truncate)


@dataclass(frozen=True, slots=True)
class ReplicationState:
    under: tuple[BlockCopies, ...]       # 0 < copies < wanted, fewest copies first
    lost: tuple[BlockCopies, ...]        # no live copy
    surplus: tuple[BlockCopies, ...]     # copies > wanted
    lost_files: tuple[str, ...]          # paths of files with a lost block (at most LOST_FILES_SHOWN)


@dataclass(frozen=True, slots=True)
class RecordedBlock:
    """A block and every worker recorded to hold a copy (live or not), for fsck --scrub."""

    block_id: int
    ino: int
    length: int
    holders: tuple[str, ...]
    checksum: int = 0             # the whole block's, recorded at commit (0: unknown)


class Replication(Policies):
    """Replica counts over the block table."""

    def recorded_blocks(self, after: int, limit: int) -> list[RecordedBlock]:
        """Blocks with at least one recorded copy, in block id order after `after` (a page)."""
        rows = self._db.execute(
            "SELECT b.block_id, b.ino, b.length, group_concat(l.worker_id), b.checksum FROM blocks b "
            "JOIN locations l ON l.block_id = b.block_id WHERE b.block_id > ? "
            "GROUP BY b.block_id, b.ino, b.length, b.checksum ORDER BY b.block_id LIMIT ?",
            (min(after, 2**63 - 1), limit)).fetchall()
        return [RecordedBlock(int(b), int(i), int(n), tuple(sorted(str(w).split(","))), _u64_from_db(c))
                for b, i, n, w, c in rows]

    def path_of(self, ino: int) -> str:
        """A path of the file `ino` ("" when it has no name left)."""
        return self._path_of(ino) or ""

    def replication_state(self, live: set[str]) -> ReplicationState:
        under: list[BlockCopies] = []
        lost: list[BlockCopies] = []
        surplus: list[BlockCopies] = []
        policies: dict[int, tuple[StorageClass, int, int, str]] = {}
        rows = self._db.execute(
            "SELECT b.block_id, b.ino, b.idx, b.length, i.block_size, i.type, i.parent, "
            "group_concat(l.worker_id), b.checksum FROM blocks b JOIN inodes i ON i.ino = b.ino AND i.orphan = 0 "
            "LEFT JOIN locations l ON l.block_id = b.block_id "
            "GROUP BY b.block_id, b.ino, b.idx, b.length, i.block_size, i.type, i.parent, b.checksum").fetchall()
        for block_id, ino, index, length, block_size, _kind, parent, workers, checksum in rows:
            directory = int(parent)
            if directory not in policies:
                policy = self._effective(directory)[0]
                policies[directory] = (policy.storage_class, policy.replicas, policy.ttl_ms, policy.placement)
            storage_class, replicas, ttl_ms, where = policies[directory]
            holders = tuple(sorted(w for w in str(workers or "").split(",") if w in live))
            wanted = placement.copies_wanted(storage_class, replicas, len(live), self.durable_replicas)
            copies = BlockCopies(int(block_id), int(ino), int(index), int(length),
                                 int(block_size) or self.block_size, holders, wanted, storage_class,
                                 int(ttl_ms), where, _u64_from_db(checksum))
            if not holders:
                lost.append(copies)
            elif len(holders) < wanted:
                under.append(copies)
            elif len(holders) > wanted:
                surplus.append(copies)
        under.sort(key=lambda c: (len(c.holders) - c.wanted, len(c.holders), c.block_id))
        lost_inos = sorted({c.ino for c in lost})[:LOST_FILES_SHOWN]
        lost_files = tuple(self._path_of(ino) or f"<inode {ino}>" for ino in lost_inos)
        return ReplicationState(tuple(under), tuple(lost), tuple(surplus), lost_files)

    def add_replica(self, block_id: int, worker_id: str) -> bool:
        """A repair stored a copy of `block_id` on `worker_id`: record it. False when the block was
        freed meanwhile (the new copy is then a pending deletion on that worker)."""
        self.replica_changes += 1
        with self.transaction():
            if self._db.execute("SELECT 1 FROM blocks WHERE block_id=?", (block_id,)).fetchone() is None:
                self._db.execute("INSERT INTO deletions (worker_id, block_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                 (worker_id, block_id))
                return False
            self._db.execute("INSERT INTO locations (block_id, worker_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                             (block_id, worker_id))
            return True

    def drop_replica(self, block_id: int, worker_id: str) -> None:
        """Gives up a surplus copy: no longer a location, deleted on the worker at its next heartbeat."""
        self.replica_changes += 1
        with self.transaction():
            removed = self._db.execute("DELETE FROM locations WHERE block_id=? AND worker_id=?",
                                       (block_id, worker_id)).rowcount
            if removed:
                self._db.execute("INSERT INTO deletions (worker_id, block_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                 (worker_id, block_id))
