"""Block reports and pending deletions: a worker's full report reconciled against the block
table, deletions handed out to workers, locations dropped by eviction or corruption.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from curvine_py.master.store.db import MAX_ID, SQLITE, _chunks
from curvine_py.master.store.policy import Policies
from curvine_py.master.store.quotas import Quotas, new_charges
from curvine_py.master.types import (
    Evicted,
    StorageClass,
)

REPORT_GRACE_MS = 60_000         # a block report may predate a commit by this much (see reconcile)



@dataclass(frozen=True, slots=True)
class Reconciled:
    delete: tuple[int, ...]      # blocks the worker holds that nothing references (orphans)
    missing: int                 # recorded copies the worker did not report (dropped)

class BlockReports(Policies, Quotas):
    """What workers tell the master about the blocks they hold."""

    def reconcile_report(self, worker_id: str, block_ids: Iterable[int]) -> Reconciled:
        """A worker's full block report at registration. Known blocks get this worker as a location,
        locations the worker no longer has are dropped (not those committed in the last
        REPORT_GRACE_MS: the report may predate them), and the ids to delete on it are returned
        with how many recorded copies the worker turned out not to have. Its pending deletions
        are cleared: a freed block it still has is unknown now, so it is in the answer anyway."""
        reported = sorted({b for b in block_ids})
        self.replica_changes += 1
        with self.transaction():
            # Unqualified `reported` is the temp table on both engines (temp is searched first).
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS reported (block_id "
                             f"{'INTEGER' if self.dialect == SQLITE else 'BIGINT'} PRIMARY KEY)")
            self._db.execute("DELETE FROM reported")
            self._db.executemany("INSERT INTO reported (block_id) VALUES (?)",
                                 [(b,) for b in reported if 0 < b <= MAX_ID])
            unknown = [b for b in reported if not 0 < b <= MAX_ID]
            unknown += [row[0] for row in self._db.execute(
                "SELECT r.block_id FROM reported r WHERE NOT EXISTS "
                "(SELECT 1 FROM blocks b WHERE b.block_id = r.block_id) AND NOT EXISTS "
                "(SELECT 1 FROM open_blocks o WHERE o.block_id = r.block_id)")]
            # A location the worker does not report is gone, unless the block was committed so
            # recently that the report may have been taken before the block was stored.
            missing = self._db.execute("DELETE FROM locations WHERE worker_id=? AND block_id NOT IN "
                                       "(SELECT block_id FROM reported) AND block_id NOT IN "
                                       "(SELECT block_id FROM blocks WHERE committed_ms > ?)",
                                       (worker_id, self._now() // 1_000_000 - REPORT_GRACE_MS)).rowcount
            self._db.execute("INSERT INTO locations (block_id, worker_id) "
                             "SELECT r.block_id, ? FROM reported r JOIN blocks b ON b.block_id = r.block_id "
                             "WHERE true ON CONFLICT DO NOTHING",   # WHERE: SQLite's upsert parse rule
                             (worker_id,))
            # A freed block this worker reports is already in `unknown`; the rest of its pending
            # deletions are blocks it does not have any more: nothing to do for those.
            self._db.execute("DELETE FROM deletions WHERE worker_id=?", (worker_id,))
            self._db.execute("DELETE FROM reported")
            return Reconciled(tuple(sorted(set(unknown))), int(missing))

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
        self.replica_changes += 1
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

    def pending_deletions(self, worker_id: str) -> list[int]:
        """For tests and fsck: what would be handed to the worker (without taking it)."""
        return [int(r[0]) for r in self._db.execute(
            "SELECT block_id FROM deletions WHERE worker_id=? ORDER BY block_id", (worker_id,))]

    def _unlink_everywhere(self, ino: int) -> None:
        now = self._now()
        parents = [int(r[0]) for r in self._db.execute("SELECT parent FROM dentries WHERE ino=?", (ino,))]
        charges = new_charges()
        for parent in parents:
            self._charge_entry(charges, ino, parent, -1)
        self._charge(charges)
        self._db.execute("DELETE FROM dentries WHERE ino=?", (ino,))
        for parent in set(parents):
            self._touch_dir(parent, now)
        self._free_inode(ino)
