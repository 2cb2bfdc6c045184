"""The PostgreSQL engine's one-statement paths of the hottest calls: create, unlink, rename (each a
server-side function, store/pgfuncs.py), lookup and a path walk. Each is one round trip where the
general code of the store takes four to seven; each answers None when its case is not covered,
having written nothing, and the caller (names.py, inodes.py) runs the general code.

Group commit without subtransactions: a writing function checks everything that can fail before it
writes, and an expected failure is a status code, not an exception, so inside a batch (storethread.py)
such a call needs no SAVEPOINT of its own: it either wrote all of itself or nothing. An unexpected
server error (no disk space, a bug) leaves the batch's transaction aborted: then its COMMIT fails
(pgconn.py checks the server's answer) and every call of that batch fails, none acknowledged, as
when a COMMIT fails. A caller's bad input never reaches the server as such: names are validated and
integers checked to fit a BIGINT first (a value that does not goes to the general path, whose
SAVEPOINT keeps its failure to itself).

Not covered (the general path): any quota in the database (their counters are charged in Python),
a create whose name exists (O_CREAT without O_EXCL, truncate, EEXIST), a rename with
RENAME_EXCHANGE or over a directory, a path with '.', '..', empty parts or a symlink.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from curvine_py.core.domain import InodeId
from curvine_py.core.errors import (
    AlreadyExists,
    CurvineError,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
)
from curvine_py.core.keys import validate_name
from curvine_py.master.store.db import MAX_ID, POSTGRESQL
from curvine_py.master.store.inodes import _ATTR_COLS_I, Inodes, _attr
from curvine_py.master.store.pgfuncs import SLOW
from curvine_py.master.types import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    Attr,
    FileType,
    RenameResult,
    UnlinkResult,
)

if TYPE_CHECKING:
    from curvine_py.master.store.names import Names

_MIN_ID = -(1 << 63)
NAME_MAX = 255

_LOOKUP = (f"SELECT p.type, {_ATTR_COLS_I} FROM inodes p LEFT JOIN dentries d ON d.parent = p.ino AND d.name = ? "
           "LEFT JOIN inodes i ON i.ino = d.ino WHERE p.ino = ? AND p.orphan != 2")


def enabled(store: Names) -> bool:
    """The fast paths apply: PostgreSQL, and no quota anywhere (the writer remembers that)."""
    return store.dialect == POSTGRESQL and not store._any_quota()


def plain_name(name: str) -> bool:
    """A valid name (keys.validate_name) that travels as UTF-8 text."""
    try:
        validate_name(name)
    except CurvineError:
        return False
    return _encodable(name)


def _fits(*values: int) -> bool:
    return all(_MIN_ID <= v <= MAX_ID for v in values)


def _encodable(*names: str) -> bool:
    """A name psycopg can send as UTF-8 text (a surrogate-escaped byte cannot): else the general path."""
    try:
        for name in names:
            name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@contextmanager
def _unit(store: Names) -> Iterator[None]:
    """Inside a transaction or batch: nothing (the function is all or nothing by itself). Alone: a
    transaction of one call, which reconnects and re-checks the leadership first (pgengine.ensure)
    and then commits with the statement itself (PgWriter.whole)."""
    if store._db.in_transaction:
        yield
        return
    with store._immediate(single=True):
        yield


def _call(store: Names, sql: str, params: Sequence[Any]) -> tuple[Any, ...]:
    with _unit(store):
        row: tuple[Any, ...] | None = store._db.whole(sql, params).fetchone()
    assert row is not None, "a server-side function returns one row"
    return row


class Deferred:
    """The answer of a one-statement call sent inside a batch without waiting for it
    (PgWriter.can_defer): the store thread resolves it after the batch's COMMIT, whose one round trip
    brings every answer, so a batch of k creates costs one round trip instead of k. The server runs
    the statements in the order they were sent, so nothing after it in the batch sees another state
    than if it had waited. Used inside its own call (an attribute of it), it reads its answer then."""

    __slots__ = ("_answer", "_decode", "_error", "_pending")

    def __init__(self, pending: Any, decode: Callable[[tuple[Any, ...]], Any]) -> None:
        self._pending = pending
        self._decode = decode
        self._answer: Any = None
        self._error: Exception | None = None

    def resolve(self) -> Any:
        """The call's result, or its error raised."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                row = pending.fetchone()
                assert row is not None, "a server-side function returns one row"
                self._answer = self._decode(row)
            except Exception as exc:  # noqa: BLE001 - kept: the call's own answer, raised below
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.resolve(), name)


def create(store: Names, parent: int, name: str, kind: FileType, mode: int, uid: int, gid: int,
           size: int, nlink: int, rdev: int, target: str | None, *, exclusive: bool) -> Attr | None:
    """A new inode and its name, or None when the case is not covered (a name that exists, for an
    O_CREAT without O_EXCL of a regular file: the general path decides)."""
    if not 0 < parent <= MAX_ID:
        raise NotFound(f"no inode {parent}")
    if not (_fits(mode, uid, gid, rdev) and _encodable(name, target or "")):
        return None
    definite = exclusive or kind != FileType.REGULAR     # an existing name is EEXIST, nothing else

    def decode(row: tuple[Any, ...]) -> Attr | None:
        status = row[0]
        if status == 0:
            return _attr(row[2:])
        if status == 1:
            raise NotFound(f"no inode {parent}")
        if status == 2:
            raise NotADirectory(f"inode {parent} is not a directory")
        if definite:
            raise AlreadyExists(f"{name!r} exists in {parent}")
        return None

    sql = "SELECT * FROM curvine_create(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    params = (parent, name, int(kind), mode, uid, gid, size, nlink, rdev, target, store._now(), store.block_size)
    if definite and store._db.can_defer():
        return cast(Attr, Deferred(store._db.defer(sql, params), decode))
    return decode(_call(store, sql, params))


def unlink(store: Names, parent: int, name: str, directory: bool, keep_orphan: bool,
           keeper: str) -> UnlinkResult | None:
    if not 0 < parent <= MAX_ID:
        raise NotFound(f"no inode {parent}")
    if not _encodable(name, keeper):
        return None
    sql = "SELECT * FROM curvine_unlink(?, ?, ?, ?, ?, ?, ?)"
    params = (parent, name, directory, keep_orphan, keeper, store._now(), store.unlink_grace_ns > 0)

    def decode(row: tuple[Any, ...]) -> UnlinkResult:
        return _unlinked(row, parent, name)

    if store._db.can_defer():
        return cast(UnlinkResult, Deferred(store._db.defer(sql, params), decode))
    return decode(_call(store, sql, params))


def _unlinked(row: tuple[Any, ...], parent: int, name: str) -> UnlinkResult:
    status, ino, nlink = row
    if status == 0:
        return UnlinkResult(InodeId(ino), int(nlink))
    if status == 1:
        raise NotFound(f"no inode {parent}")
    if status == 2:
        raise NotADirectory(f"inode {parent} is not a directory")
    if status == 3:
        raise NotFound(f"{name!r} not found in {parent}")
    if status == 4:
        raise NotADirectory(f"{name!r} is not a directory")
    if status == 5:
        raise DirectoryNotEmpty(f"{name!r} is not empty")
    if status == 6:
        raise IsADirectory(f"{name!r} is a directory")
    raise AssertionError(f"curvine_unlink answered status {status}")


def rename(store: Names, parent: int, name: str, new_parent: int, new_name: str, flags: int,
           keep_orphan: bool, keeper: str) -> RenameResult | None:
    if flags & RENAME_EXCHANGE:
        return None
    for directory in (parent, new_parent):
        if not 0 < directory <= MAX_ID:
            raise NotFound(f"no inode {directory}")
    if not _encodable(name, new_name, keeper):
        return None
    status, bad, ino, nlink = _call(
        store, "SELECT * FROM curvine_rename(?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (parent, name, new_parent, new_name, bool(flags & RENAME_NOREPLACE), keep_orphan, keeper, store._now(),
         store.unlink_grace_ns > 0))
    if status == 0:
        return RenameResult(InodeId(ino), int(nlink))
    if status == SLOW:
        return None
    errors: dict[int, Callable[[], CurvineError]] = {
        1: lambda: NotFound(f"no inode {bad}"),
        2: lambda: NotADirectory(f"inode {bad} is not a directory"),
        3: lambda: NotFound(f"{name!r} not found in {parent}"),
        4: lambda: AlreadyExists(f"{new_name!r} exists"),
        5: lambda: AlreadyExists(f"{new_name!r} exists in {new_parent}"),
        6: lambda: InvalidArgument("cannot move a directory into its own subtree"),
        7: lambda: NotADirectory(f"{new_name!r} is not a directory"),
        8: lambda: IsADirectory(f"{new_name!r} is a directory"),
    }
    raise errors[status]()


def lookup(store: Inodes, parent: int, name: str) -> Attr:
    """A name in a directory, one statement (the caller left '.', '..' and bad names to the general path)."""
    if not 0 < parent <= MAX_ID:
        raise NotFound(f"no inode {parent}")
    row = store._db.alone(_LOOKUP, (name, parent)).fetchone()
    if row is None:
        raise NotFound(f"no inode {parent}")
    if row[0] != FileType.DIRECTORY:
        raise NotADirectory(f"inode {parent} is not a directory")
    if row[1] is None:
        raise NotFound(f"{name!r} not found in {parent}")
    return _attr(row[1:])


def walk(store: Inodes, path: str) -> Attr | None:
    """The inode at an absolute path of plain names (no symlink on the way), or None: the general walk."""
    parts = path.split("/")[1:]
    if parts == [""]:
        parts = []
    if any(p in ("", ".", "..") or len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts) \
            or not _encodable(path):
        return None
    row = store._db.alone("SELECT * FROM curvine_walk(CAST(? AS TEXT[]))", (parts,)).fetchone()
    assert row is not None, "curvine_walk returns one row"
    status, at = row[0], row[1]
    if status == 0:
        return _attr(row[2:])
    if status == 1:
        raise NotFound(f"{path}: {parts[at - 1]!r} not found")
    if status == 2:
        raise NotADirectory(f"{path}: a component is not a directory")
    if status == 3:
        raise NotFound(f"no inode {row[2]}")
    return None
