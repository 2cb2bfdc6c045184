"""Names: dentries and the inode mutations that go with them (lookup, readdir, create, setattr,
link, unlink, rename with RENAME_NOREPLACE/EXCHANGE, orphans released by their keeper).
"""
from __future__ import annotations

from curvine_py.core import posix
from curvine_py.core.domain import InodeId
from curvine_py.core.errors import (
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    NameTooLong,
    NotADirectory,
    NotFound,
    NotPermitted,
)
from curvine_py.core.keys import PATH_MAX, validate_name
from curvine_py.master.store import pgfast
from curvine_py.master.store.db import MAX_ID, POSTGRESQL
from curvine_py.master.store.inodes import _ATTR_COLS, _ATTR_COLS_I, _attr, _type_error
from curvine_py.master.store.policy import Policies
from curvine_py.master.store.quotas import Quotas, new_charges
from curvine_py.master.types import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    ROOT_INO,
    Attr,
    DirEntry,
    FileType,
    RenameResult,
    SetAttrChanges,
    UnlinkResult,
)

READDIR_DEFAULT_LIMIT = 1000
READDIR_MAX_LIMIT = 10_000


class Names(Policies, Quotas):
    """The namespace operations."""

    def lookup(self, parent: int, name: str) -> Attr:
        if self.dialect == POSTGRESQL and name not in (".", "..") and pgfast.plain_name(name):
            return pgfast.lookup(self, parent, name)
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

    def readlink(self, ino: int) -> str:
        row = self._db.execute("SELECT type, target FROM inodes WHERE ino=?", (ino,)).fetchone() \
            if 0 < ino <= MAX_ID else None
        if row is None:
            raise NotFound(f"no inode {ino}")
        if FileType(row[0]) != FileType.SYMLINK:
            raise InvalidArgument(f"inode {ino} is not a symlink")
        return str(row[1])

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
        target = symlink_target if kind == FileType.SYMLINK else None
        size = len(symlink_target.encode("utf-8", "surrogateescape")) if target is not None else 0
        nlink = 2 if kind == FileType.DIRECTORY else 1
        rdev = rdev if kind in (FileType.CHARDEV, FileType.BLOCKDEV) else 0
        if pgfast.enabled(self):      # one statement; None: the name exists, decided below
            made = pgfast.create(self, parent, name, kind, mode, uid, gid, size, nlink, rdev, target,
                                 exclusive=exclusive)
            if made is not None:
                return made
        with self.transaction():
            parent_attr, existing = self._dir_and_child(parent, name)
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
                    charges = new_charges()
                    self._charge_names(charges, existing, -old.size)
                    self._charge(charges)
                    self._truncate_blocks(existing, 0, old.block_size or self.block_size)
                    self._db.execute("UPDATE inodes SET size=0, mtime_ns=?, ctime_ns=? WHERE ino=?",
                                     (now, now, existing))
                    return self._get(existing)
                return old
            charges = new_charges()
            self._charge_dir(charges, parent, 0, 1)
            self._charge(charges)
            gid, perm = posix.inherit_from_parent(parent_attr.mode, parent_attr.gid, gid, mode,
                                                  kind == FileType.DIRECTORY)
            if kind == FileType.REGULAR:
                block_size = self._effective(parent)[0].block_size or self.block_size
            else:
                block_size = self.block_size
            cursor = self._db.execute(
                "INSERT INTO inodes (type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev,"
                f" block_size, target, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING {_ATTR_COLS}",
                (int(kind), perm, uid, gid, size, nlink, now, now, now, rdev, block_size, target, parent))
            created = _attr(cursor.fetchone())     # nothing below changes the new inode's row
            ino = created.ino
            self._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)", (parent, name, ino))
            if kind == FileType.DIRECTORY:
                self._add_nlink(parent, 1)
            self._touch_dir(parent, now)
            return created

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
                charges = new_charges()
                self._charge_names(charges, ino, changes.size - attr.size)
                self._charge(charges)
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
            charges = new_charges()
            self._charge_dir(charges, new_parent, attr.size if attr.type == FileType.REGULAR else 0, 1)
            self._charge(charges)
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
        if pgfast.enabled(self):
            done = pgfast.unlink(self, parent, name, directory, keep_orphan, keeper)
            if done is not None:
                return done
        with self.transaction():
            self._dir(parent)
            ino = self._child(parent, name)
            if ino is None:
                raise NotFound(f"{name!r} not found in {parent}")
            kind = self._type_of(ino)
            now = self._now()
            if directory == (kind == FileType.DIRECTORY):
                charges = new_charges()
                self._charge_entry(charges, ino, parent, -1)
                self._charge(charges)
            if directory:
                if kind != FileType.DIRECTORY:
                    raise NotADirectory(f"{name!r} is not a directory")
                if self._db.execute("SELECT 1 FROM dentries WHERE parent=? LIMIT 1", (ino,)).fetchone():
                    raise DirectoryNotEmpty(f"{name!r} is not empty")
                self._db.execute("DELETE FROM dentries WHERE parent=? AND name=?", (parent, name))
                self._add_nlink(parent, -1)
                self._touch_dir(parent, now)
                self._free_inode(ino)
                return UnlinkResult(InodeId(ino), 0)
            if kind == FileType.DIRECTORY:
                raise IsADirectory(f"{name!r} is a directory")
            self._db.execute("DELETE FROM dentries WHERE parent=? AND name=?", (parent, name))
            row = self._db.execute("UPDATE inodes SET nlink = nlink - 1, ctime_ns=? WHERE ino=? "
                                   "RETURNING nlink", (now, ino)).fetchone()
            nlink = max(0, int(row[0]))
            self._touch_dir(parent, now)
            self._unlinked_from(ino, nlink, keep_orphan, keeper)
            return UnlinkResult(InodeId(ino), nlink)

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
        posix.check_rename_flags(flags)
        validate_name(name)
        validate_name(new_name)
        if pgfast.enabled(self):
            done = pgfast.rename(self, parent, name, new_parent, new_name, flags, keep_orphan, keeper)
            if done is not None:
                return done
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
            charges = new_charges()       # judged by the net effect: a replaced name goes too
            if dst is not None:
                self._charge_entry(charges, dst, new_parent, -1)
            self._charge_move(charges, src, parent, new_parent)
            self._charge(charges)
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
                    result = RenameResult(InodeId(dst), 0)
                else:
                    row = self._db.execute("UPDATE inodes SET nlink = nlink - 1, ctime_ns=? WHERE ino=? "
                                           "RETURNING nlink", (now, dst)).fetchone()
                    nlink = max(0, int(row[0]))
                    self._unlinked_from(dst, nlink, keep_orphan, keeper)
                    result = RenameResult(InodeId(dst), nlink)
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
        charges = new_charges()
        self._charge_move(charges, src, parent, new_parent)
        self._charge_move(charges, dst, new_parent, parent)
        self._charge(charges)
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
