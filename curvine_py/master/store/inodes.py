"""Inode rows and the path walk: reading attributes, parent links, resolving paths (symlinks
included), and freeing an inode with its blocks (pending deletions) or keeping it as an orphan.
"""
from __future__ import annotations

import errno
from collections import deque
from collections.abc import Sequence

from curvine_py.core.domain import InodeId
from curvine_py.core.errors import (
    CurvineError,
    InvalidArgument,
    IsADirectory,
    NameTooLong,
    NotADirectory,
    NotFound,
)
from curvine_py.core.keys import PATH_MAX
from curvine_py.core.rules import truncate_map
from curvine_py.master.store.db import MAX_ID, POSTGRESQL, Database
from curvine_py.master.types import (
    ROOT_INO,
    Attr,
    FileType,
)

SYMLOOP_MAX = 40                 # as Linux: more symlinks than this in one resolution is ELOOP

_ATTR_COLS = ("ino, type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, "
              "generation, block_size, stored")

_ATTR_COLS_I = ", ".join("i." + c.strip() for c in _ATTR_COLS.split(","))   # joined with dentries d


def _attr(row: Sequence[int]) -> Attr:
    return Attr(ino=InodeId(row[0]), type=FileType(row[1]), mode=row[2], uid=row[3], gid=row[4], size=row[5],
                nlink=row[6], atime_ns=row[7], mtime_ns=row[8], ctime_ns=row[9], rdev=row[10],
                generation=row[11], block_size=row[12], stored_bytes=row[13])


# An inode in its unlink grace (orphan=2) is gone for every call: a new open by inode must fail
# (ESTALE, so the kernel looks the name up again and finds the new file). Only its blocks stay, for
# handles that already hold the block map. The predicate of every read of an inode by number.
VISIBLE = "orphan != 2"


def check_ino(ino: int) -> None:
    """NotFound for a number no inode can have (before any statement)."""
    if not 0 < ino <= MAX_ID:
        raise NotFound(f"no inode {ino}")


def _type_error(kind: FileType, expected: str) -> CurvineError:
    if kind == FileType.DIRECTORY:
        return IsADirectory(f"is a directory (expected {expected})")
    return InvalidArgument(f"not a {expected}")


class Inodes(Database):
    """Inode helpers shared by every part of the store."""

    def _row(self, ino: int) -> Sequence[int]:
        check_ino(ino)
        row = self._db.execute(f"SELECT {_ATTR_COLS} FROM inodes WHERE ino=? AND {VISIBLE}", (ino,)).fetchone()
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

    def _dir_and_child(self, parent: int, name: str) -> tuple[Attr, int | None]:
        """_dir(parent) and _child(parent, name) in one statement (one round trip on PostgreSQL)."""
        if not 0 < parent <= MAX_ID:
            raise NotFound(f"no inode {parent}")
        row = self._db.execute(f"SELECT {_ATTR_COLS}, (SELECT d.ino FROM dentries d WHERE d.parent=? AND d.name=?) "
                               "FROM inodes WHERE ino=? AND orphan!=2", (parent, name, parent)).fetchone()
        if row is None:
            raise NotFound(f"no inode {parent}")
        attr = _attr(row)
        if attr.type != FileType.DIRECTORY:
            raise NotADirectory(f"inode {parent} is not a directory")
        return attr, None if row[-1] is None else int(row[-1])

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

    def _regular(self, ino: int) -> Attr:
        attr = self._get(ino)
        if attr.type != FileType.REGULAR:
            raise _type_error(attr.type, "regular file")
        return attr

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
        if self.dialect == POSTGRESQL and path.startswith("/") and "\x00" not in path \
                and len(path.encode("utf-8", "surrogateescape")) <= PATH_MAX:
            from curvine_py.master.store import pgfast  # pgfast builds on this module
            found = pgfast.walk(self, path)
            if found is not None:
                return found
        return self._get(self._resolve(path, follow_symlinks))

    def _drop_block(self, block_id: int) -> None:
        """Forget a committed block; every worker holding it gets a pending deletion."""
        self._db.execute("INSERT INTO deletions (worker_id, block_id) "
                         "SELECT worker_id, block_id FROM locations WHERE block_id=? ON CONFLICT DO NOTHING",
                         (block_id,))
        self._db.execute("DELETE FROM locations WHERE block_id=?", (block_id,))
        self._db.execute("DELETE FROM blocks WHERE block_id=?", (block_id,))

    def _drop_open_block(self, block_id: int, workers: str) -> None:
        self._db.executemany("INSERT INTO deletions (worker_id, block_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
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
        self._db.execute("DELETE FROM quotas WHERE ino=?", (ino,))
        self._db.execute("DELETE FROM inodes WHERE ino=?", (ino,))

    def _unlinked_from(self, ino: int, nlink: int, keep_orphan: bool, keeper: str = "") -> None:
        """Bookkeeping after one name of a non-directory went away and nlink dropped to `nlink`."""
        if nlink <= 0:
            if keep_orphan:
                self._db.execute("UPDATE inodes SET orphan=1, nlink=0 WHERE ino=?", (ino,))
                if keeper:
                    self._db.execute("INSERT INTO orphan_keepers (ino, session) VALUES (?, ?) "
                                     "ON CONFLICT (ino) DO UPDATE SET session = excluded.session",
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
        rule = truncate_map(size, block_size)     # the one truncate rule (core/rules.py), as the client's
        for (block_id,) in self._db.execute("SELECT block_id FROM blocks WHERE ino=? AND idx>=?",
                                            (ino, rule.first_dropped)).fetchall():
            self._drop_block(int(block_id))
        if rule.tail_length:
            self._db.execute("UPDATE blocks SET length=?, checksum=0 WHERE ino=? AND idx=? AND length>?",
                             (rule.tail_length, ino, rule.tail_index, rule.tail_length))
        self._recount_stored(ino)

    def _recount_stored(self, ino: int) -> None:
        """inodes.stored = the bytes of the file's committed blocks. Kept here, where the block map
        changes (commit, truncate), so a getattr reads one column instead of summing the blocks."""
        self._db.execute("UPDATE inodes SET stored = (SELECT COALESCE(SUM(length), 0) FROM blocks "
                         "WHERE ino=?) WHERE ino=?", (ino, ino))
