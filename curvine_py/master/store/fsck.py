"""Totals (counts, statfs) and the consistency check of the metadata (fsck of the namespace).
"""
from __future__ import annotations

from collections.abc import Sequence

from curvine_py.master.store.quotas import Quotas
from curvine_py.master.types import (
    NamespaceCounts,
    StatFs,
    WorkerInfo,
)

# Each check: the message a problem row fills in (str.format), and the query whose every row is one problem.
_CHECKS: tuple[tuple[str, str], ...] = (
    ("dentry points to missing inode {0}",
     "SELECT DISTINCT d.ino FROM dentries d LEFT JOIN inodes i ON i.ino = d.ino WHERE i.ino IS NULL"),
    ("dentry under missing or non-directory inode {0}",
     ("SELECT DISTINCT d.parent FROM dentries d LEFT JOIN inodes i ON i.ino = d.parent "
      "WHERE i.ino IS NULL OR i.type != 2")),
    ("inode {0}: nlink {1} does not match its names",
     ("SELECT i.ino, i.nlink FROM inodes i WHERE i.type != 2 AND i.nlink != "
      "(SELECT COUNT(*) FROM dentries d WHERE d.ino = i.ino)")),
    ("directory {0}: nlink {1} does not match its subdirectories",
     ("SELECT i.ino, i.nlink FROM inodes i WHERE i.type = 2 AND i.nlink != 2 + "
      "(SELECT COUNT(*) FROM dentries d JOIN inodes c ON c.ino = d.ino "
      "WHERE d.parent = i.ino AND c.type = 2)")),
    ("directory {0} has {1} names",
     ("SELECT d.ino, COUNT(*) FROM dentries d JOIN inodes i ON i.ino = d.ino "
      "WHERE i.type = 2 GROUP BY d.ino HAVING COUNT(*) > 1")),
    ("inode {0} is unreachable and not an orphan",
     ("SELECT i.ino FROM inodes i WHERE i.ino != 1 AND i.orphan = 0 AND NOT EXISTS "
      "(SELECT 1 FROM dentries d WHERE d.ino = i.ino)")),
    # A name whose chain of parents never reaches the root: a directory cycle (a/b/a) or a detached
    # subtree. UNION (not UNION ALL) keeps the walk finite on a cycle; the reachability of an inode with
    # no name at all is the check above.
    ("inode {0} is not reachable from the root (a directory cycle or a detached subtree)",
     ("WITH RECURSIVE reach(ino) AS (SELECT ino FROM inodes WHERE ino = 1 UNION "
      "SELECT d.ino FROM dentries d JOIN reach r ON d.parent = r.ino) "
      "SELECT i.ino FROM inodes i WHERE i.orphan = 0 AND i.ino NOT IN (SELECT ino FROM reach) "
      "AND EXISTS (SELECT 1 FROM dentries d WHERE d.ino = i.ino)")),
    ("directory {0}: parent column does not match its dentry",
     ("SELECT i.ino FROM inodes i WHERE i.type = 2 AND i.ino != 1 AND NOT EXISTS "
      "(SELECT 1 FROM dentries d WHERE d.ino = i.ino AND d.parent = i.parent)")),
    ("block {0} of a missing inode",
     "SELECT b.block_id FROM blocks b LEFT JOIN inodes i ON i.ino = b.ino WHERE i.ino IS NULL"),
    ("location of unknown block {0}",
     ("SELECT l.block_id FROM locations l WHERE NOT EXISTS "
      "(SELECT 1 FROM blocks b WHERE b.block_id = l.block_id)")),
    ("xattrs of missing inode {0}",
     "SELECT DISTINCT x.ino FROM xattrs x LEFT JOIN inodes i ON i.ino = x.ino WHERE i.ino IS NULL"),
    ("quota on missing or non-directory inode {0}",
     ("SELECT q.ino FROM quotas q LEFT JOIN inodes i ON i.ino = q.ino "
      "WHERE i.ino IS NULL OR i.type != 2 OR i.orphan != 0")),
    ("inode {0}: {1} stored bytes recorded, its blocks hold {2}",
     ("SELECT i.ino, i.stored, COALESCE(SUM(b.length), 0) FROM inodes i "
      "LEFT JOIN blocks b ON b.ino = i.ino GROUP BY i.ino, i.stored "
      "HAVING i.stored != COALESCE(SUM(b.length), 0)")),
)


class Checks(Quotas):
    """Counts and checks over the whole database."""

    def counts(self) -> NamespaceCounts:
        files, dirs, inodes = self._db.execute(
            "SELECT COALESCE(SUM(CASE WHEN type=1 THEN 1 ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN type=2 THEN 1 ELSE 0 END), 0), COUNT(*) FROM inodes").fetchone()
        blocks = self._db.execute("SELECT COUNT(*) FROM blocks").fetchone()[0]
        return NamespaceCounts(int(files), int(dirs), int(blocks), int(inodes))

    def inode_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM inodes").fetchone()[0])

    def statfs(self, live: Sequence[WorkerInfo], inodes: int | None = None) -> StatFs:
        """`inodes`: the count, when the caller took it elsewhere (see Membership.report)."""
        inodes = inodes if inodes is not None else self.inode_count()
        return StatFs(capacity=sum(w.capacity for w in live), used=sum(w.used for w in live),
                      available=sum(w.available for w in live), files=inodes, block_size=self.block_size)

    def check(self) -> list[str]:
        """Consistency check (fsck of the namespace): returns the problems found, [] when sound."""
        problems = [message.format(*row) for message, sql in _CHECKS for row in self._db.execute(sql)]
        for quota, size, inodes in self.recount_quotas():
            problems.append(f"quota of {quota.path}: counts {quota.used_bytes} bytes {quota.used_inodes} "
                            f"inodes, the subtree holds {size} bytes {inodes} inodes")
        return problems
