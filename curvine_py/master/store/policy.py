"""Per-directory data policy: the effective policy of a directory (inherited from its nearest
ancestor that has one), get and set by path.
"""
from __future__ import annotations

from curvine_py.core.errors import (
    InvalidArgument,
    NotFound,
)
from curvine_py.master.store.db import MAX_ID
from curvine_py.master.store.inodes import Inodes
from curvine_py.master.types import (
    PLACEMENT_HASH,
    PLACEMENT_LOCAL,
    ROOT_INO,
    FileType,
    Policy,
    PolicyAt,
    StorageClass,
)

_POLICY_CHAIN = """
WITH RECURSIVE up(ino, depth) AS (
    SELECT CAST(? AS BIGINT), 0
    UNION ALL
    SELECT i.parent, up.depth + 1 FROM up JOIN inodes i ON i.ino = up.ino
    WHERE up.ino != 1 AND i.parent != 0 AND up.depth < 65536)
SELECT i.ino, i.parent, i.p_class, i.p_replicas, i.p_ttl_ms, i.p_block_size, i.p_placement, i.p_compress
FROM up JOIN inodes i ON i.ino = up.ino
"""

MAX_REPLICAS = 16
MIN_BLOCK_SIZE = 4096
MAX_BLOCK_SIZE = 1 << 31



def governing_dir(ino: int, kind: FileType, parent: int) -> int:
    """The directory whose policy governs inode `ino`: itself for a directory, else its parent
    (the root for one without)."""
    return ino if kind == FileType.DIRECTORY else parent or ROOT_INO

class Policies(Inodes):
    """Directory policies."""

    def _effective(self, dir_ino: int) -> tuple[Policy, int]:
        """The policy in force in directory `dir_ino`: the nearest ancestor's policy; a class left
        UNSPECIFIED there comes from further up. Returns (resolved policy, defining inode)."""
        found: Policy | None = None
        where: int = ROOT_INO
        current = dir_ino
        storage_class = StorageClass.UNSPECIFIED
        # The directories up to the root in one statement (one round trip on PostgreSQL, whatever
        # the depth); a row it cannot reach (an orphan's directory) is asked for alone below.
        chain = {int(r[0]): tuple(r[1:]) for r in self._db.execute(_POLICY_CHAIN, (dir_ino,))}
        for _ in range(1 << 16):
            row = chain.get(current)
            if row is None:
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
        return governing_dir(ino, FileType(row[0]), int(row[1]))

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
        self.replica_changes += 1      # the replicas wanted may change
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
