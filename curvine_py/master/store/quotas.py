"""Directory quotas: bytes and inodes per directory, counted over its subtree.

Counting rule: every name (dentry) below a quota'd directory counts one inode, and, for a regular
file, its size in bytes; a file with two names counts at both (as a second name could be its only
one tomorrow). An unlinked file that is still open has no name and counts nowhere. The usage is
kept in the `quotas` row of each quota'd directory and moved by every mutation inside the same
transaction (a mutation that would take a quota over its limit raises QuotaExceeded, EDQUOT, and
rolls back with it: nothing is half-written). Lowering a limit below the usage is allowed; then
only decreases pass until the usage is back under it.

Mutations collect their changes in a `Charges` (quota'd directory -> bytes, inodes) and call
`_charge` once, so a rename that replaces a big file with a small one is judged by its net effect.
"""
from __future__ import annotations

from collections import defaultdict

from curvine_py.core.domain import InodeId
from curvine_py.core.errors import InvalidArgument, QuotaExceeded
from curvine_py.master.store.db import MAX_ID
from curvine_py.master.store.inodes import Inodes
from curvine_py.master.types import FileType, QuotaInfo, StatFs

Charges = defaultdict[int, list[int]]     # quota'd directory inode -> [bytes, inodes]

_QUOTA_COLS = "ino, max_bytes, max_inodes, used_bytes, used_inodes"

# The quota'd directories at or above one directory, nearest first. Directories have one parent,
# so the walk up `inodes.parent` ends at the root (parent 0); the depth bound stops a corrupt cycle.
_CHAIN = """
WITH RECURSIVE up(ino, depth) AS (
    SELECT CAST(? AS BIGINT), 0
    UNION ALL
    SELECT i.parent, up.depth + 1 FROM up JOIN inodes i ON i.ino = up.ino
    WHERE up.ino != 1 AND i.parent != 0 AND up.depth < 65536)
SELECT q.ino FROM up JOIN quotas q ON q.ino = up.ino ORDER BY up.depth
"""

# Usage of everything below directory ? (each name once; directories are walked, files are not).
_BELOW = """
WITH RECURSIVE tree(ino, type, size) AS (
    SELECT i.ino, i.type, i.size FROM dentries d JOIN inodes i ON i.ino = d.ino WHERE d.parent = ?
    UNION ALL
    SELECT i.ino, i.type, i.size FROM tree t JOIN dentries d ON d.parent = t.ino AND t.type = 2
    JOIN inodes i ON i.ino = d.ino)
SELECT COALESCE(SUM(CASE WHEN type = 1 THEN size ELSE 0 END), 0), COUNT(*) FROM tree
"""


def new_charges() -> Charges:
    return defaultdict(lambda: [0, 0])


class Quotas(Inodes):
    """Quota rows, their usage counters, and their enforcement."""

    # ------------------------------------------------------------------ charging (mutations call these)

    def _any_quota(self) -> bool:
        # The writer remembers an empty quota table (a round trip per mutation saved on PostgreSQL):
        # only set_quota and a load add rows, and both forget it first. Readers always ask.
        if self._quota_free:
            return False
        found = self._db.execute("SELECT 1 FROM quotas LIMIT 1").fetchone() is not None
        self._quota_free = not found and self._writer
        return found

    def _quota_chain(self, directory: int) -> list[int]:
        return [int(r[0]) for r in self._db.execute(_CHAIN, (directory,))]

    def _charge_dir(self, charges: Charges, directory: int, size: int, inodes: int) -> None:
        """A name in `directory` changes the usage by (size bytes, inodes)."""
        if not (size or inodes) or not self._any_quota():
            return
        for quota in self._quota_chain(directory):
            charges[quota][0] += size
            charges[quota][1] += inodes

    def _charge_names(self, charges: Charges, ino: int, size: int) -> None:
        """Inode `ino` (a regular file) grows or shrinks by `size` bytes: counted at each of its names."""
        if not size or not self._any_quota():
            return
        for (parent,) in self._db.execute("SELECT parent FROM dentries WHERE ino=?", (ino,)).fetchall():
            self._charge_dir(charges, int(parent), size, 0)

    def _charge_entry(self, charges: Charges, ino: int, directory: int, sign: int) -> None:
        """A name of `ino` appears in (sign 1) or goes from (sign -1) `directory`, with its subtree."""
        if not self._any_quota():
            return
        size, inodes = self._entry_usage(ino)
        self._charge_dir(charges, directory, sign * size, sign * inodes)

    def _entry_usage(self, ino: int) -> tuple[int, int]:
        """What one name of inode `ino` counts: itself, plus its subtree for a directory."""
        row = self._db.execute("SELECT type, size FROM inodes WHERE ino=?", (ino,)).fetchone()
        if row is None:
            return 0, 0
        kind = FileType(row[0])
        if kind == FileType.DIRECTORY:
            below_bytes, below_inodes = self._usage_below(ino)
            return below_bytes, below_inodes + 1
        return (int(row[1]) if kind == FileType.REGULAR else 0), 1

    def _usage_below(self, directory: int) -> tuple[int, int]:
        size, inodes = self._db.execute(_BELOW, (directory,)).fetchone()
        return int(size), int(inodes)

    def _charge_move(self, charges: Charges, ino: int, old_parent: int, new_parent: int) -> None:
        """The name of `ino` moves from `old_parent` to `new_parent`: quotas above only one side change."""
        if old_parent == new_parent or not self._any_quota():
            return
        old, new = self._quota_chain(old_parent), self._quota_chain(new_parent)
        if old == new:
            return
        size, inodes = self._entry_usage(ino)
        for quota in old:
            if quota not in new and quota != ino:
                charges[quota][0] -= size
                charges[quota][1] -= inodes
        for quota in new:
            if quota not in old and quota != ino:
                charges[quota][0] += size
                charges[quota][1] += inodes

    def _charge(self, charges: Charges, *, apply: bool = True) -> None:
        """Checks every growth against its limit (QuotaExceeded) and, with `apply`, records the usage."""
        for quota, (size, inodes) in charges.items():
            if not (size or inodes):
                continue
            row = self._db.execute("SELECT max_bytes, max_inodes, used_bytes, used_inodes FROM quotas "
                                   "WHERE ino=?", (quota,)).fetchone()
            max_bytes, max_inodes, used_bytes, used_inodes = (int(v) for v in row)
            if size > 0 and max_bytes and used_bytes + size > max_bytes:
                raise QuotaExceeded(f"directory {self._path_of(quota) or quota}: byte quota {max_bytes} "
                                    f"exceeded ({used_bytes} used, {size} more)")
            if inodes > 0 and max_inodes and used_inodes + inodes > max_inodes:
                raise QuotaExceeded(f"directory {self._path_of(quota) or quota}: inode quota {max_inodes} "
                                    f"exceeded ({used_inodes} used, {inodes} more)")
            if apply:
                self._db.execute("UPDATE quotas SET used_bytes = used_bytes + ?, used_inodes = used_inodes + ? "
                                 "WHERE ino=?", (size, inodes, quota))

    # ------------------------------------------------------------------ the quota RPCs

    def set_quota(self, path: str, max_bytes: int, max_inodes: int) -> QuotaInfo:
        """Sets (or, with both 0, removes) a directory's quota. The usage is counted now, once."""
        if not 0 <= max_bytes <= MAX_ID or not 0 <= max_inodes <= MAX_ID:
            raise InvalidArgument("quota limits must be 0 (unlimited) .. 2**63-1")
        with self.transaction():
            ino = self._resolve(path, True)
            self._dir(ino)
            self._quota_free = False
            if not (max_bytes or max_inodes):
                self._db.execute("DELETE FROM quotas WHERE ino=?", (ino,))
            else:
                row = self._db.execute("SELECT used_bytes, used_inodes FROM quotas WHERE ino=?", (ino,)).fetchone()
                used = (int(row[0]), int(row[1])) if row is not None else self._usage_below(ino)
                self._db.execute(f"INSERT INTO quotas ({_QUOTA_COLS}) VALUES (?, ?, ?, ?, ?) "
                                 "ON CONFLICT (ino) DO UPDATE SET max_bytes = excluded.max_bytes, "
                                 "max_inodes = excluded.max_inodes, used_bytes = excluded.used_bytes, "
                                 "used_inodes = excluded.used_inodes",
                                 (ino, max_bytes, max_inodes, *used))
            return self._quota_of(ino)

    def get_quota(self, path: str) -> QuotaInfo:
        """The directory's quota, or limits 0 and its usage counted now when it has none."""
        ino = self._resolve(path, True)
        self._dir(ino)
        return self._quota_of(ino)

    def _quota_of(self, ino: int) -> QuotaInfo:
        row = self._db.execute(f"SELECT {_QUOTA_COLS} FROM quotas WHERE ino=?", (ino,)).fetchone()
        path = self._path_of(ino) or "/"
        if row is None:
            used_bytes, used_inodes = self._usage_below(ino)
            return QuotaInfo(InodeId(ino), path, 0, 0, used_bytes, used_inodes)
        return QuotaInfo(InodeId(ino), path, int(row[1]), int(row[2]), int(row[3]), int(row[4]))

    def list_quotas(self) -> list[QuotaInfo]:
        return [QuotaInfo(InodeId(r[0]), self._path_of(int(r[0])) or "/", int(r[1]), int(r[2]), int(r[3]), int(r[4]))
                for r in self._db.execute(f"SELECT {_QUOTA_COLS} FROM quotas ORDER BY ino").fetchall()]

    def nearest_quota(self, ino: int) -> QuotaInfo | None:
        """The quota that bounds inode `ino` most closely: its directory's own (a file's directory)
        or its nearest quota'd ancestor's."""
        attr = self._get(ino)
        directory = ino
        if attr.type != FileType.DIRECTORY:
            row = self._db.execute("SELECT parent FROM inodes WHERE ino=?", (ino,)).fetchone()
            directory = int(row[0])
        chain = self._quota_chain(directory) if self._any_quota() else []
        return self._quota_of(chain[0]) if chain else None

    def recount_quotas(self) -> list[tuple[QuotaInfo, int, int]]:
        """For fsck: (quota, recounted bytes, recounted inodes) of every quota whose counters are off."""
        wrong = []
        for quota in self.list_quotas():
            size, inodes = self._usage_below(quota.ino)
            if (size, inodes) != (quota.used_bytes, quota.used_inodes):
                wrong.append((quota, size, inodes))
        return wrong


def quota_statfs(cluster: StatFs, quota: QuotaInfo | None) -> StatFs:
    """What statfs of a directory reports: the cluster, bounded by the directory's quota (its limit as
    the size, as JuiceFS does, so a mount rooted there shows the quota in df)."""
    if quota is None or not quota.limited:
        return cluster
    capacity = quota.max_bytes or cluster.capacity
    available = cluster.available
    if quota.max_bytes:
        available = min(available, max(0, quota.max_bytes - quota.used_bytes))
    return StatFs(capacity=capacity, used=quota.used_bytes if quota.max_bytes else cluster.used,
                  available=available, files=quota.used_inodes, block_size=cluster.block_size,
                  max_files=quota.max_inodes)

