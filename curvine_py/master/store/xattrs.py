"""Extended attributes of inodes (names up to 255 bytes, values up to 64 KiB, as Linux).
"""
from __future__ import annotations

import errno

from curvine_py.core.errors import (
    AlreadyExists,
    InvalidArgument,
    NoData,
)
from curvine_py.master.store.inodes import Inodes
from curvine_py.master.types import (
    XATTR_CREATE,
    XATTR_REPLACE,
)

XATTR_NAME_MAX = 255
XATTR_VALUE_MAX = 64 * 1024      # as Linux (XATTR_SIZE_MAX)


class Xattrs(Inodes):
    """xattr get/set/list/remove."""

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
            self._db.execute("INSERT INTO xattrs (ino, name, value) VALUES (?, ?, ?) "
                             "ON CONFLICT (ino, name) DO UPDATE SET value = excluded.value",
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
