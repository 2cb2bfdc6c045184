"""What the mount remembers between requests: kernel lookup counts, open files (one per inode,
shared by all its handles) and file/directory handles. Caches only: everything can be rebuilt from
the master, nothing here is durable.

Concurrency rule (trio, one thread): the tables are only touched from trio tasks, so a sequence of
statements without an `await` between them is atomic. Code that checks a table, awaits, then
mutates it must check again after the await (see handles.Files.open/release).
"""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from curvine_py.client.files import CurvineFile
from curvine_py.core.domain import Attr, DirEntry, InodeId
from curvine_py.fuse.names import NameCache

log = logging.getLogger(__name__)


class LookupCounts:
    """The kernel's references to inodes: +1 for every entry we reply (lookup, create, mkdir,
    mknod, symlink, link, readdirplus entries other than . and ..), -n on forget."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def add(self, ino: int, n: int = 1) -> None:
        self._counts[ino] = self._counts.get(ino, 0) + n

    def forget(self, ino: int, n: int) -> bool:
        """Returns True when the kernel holds no reference any more."""
        left = self._counts.get(ino, 0) - n
        if left > 0:
            self._counts[ino] = left
            return False
        if left < 0:
            log.debug("forget of inode %d below zero (%d)", ino, left)
        self._counts.pop(ino, None)
        return True

    def get(self, ino: int) -> int:
        return self._counts.get(ino, 0)

    def __len__(self) -> int:
        return len(self._counts)


@dataclass(slots=True)
class OpenFile:
    """One inode open in this mount; every handle of it shares the CurvineFile, so writes through
    one descriptor are visible to reads through another before any commit (POSIX in one mount)."""
    ino: int
    file: CurvineFile
    mode: int                   # last known permission bits (suid/sgid clearing on write)
    handles: int = 0
    unlinked: bool = False      # its last name went away while open: ReleaseOrphan at last close
    last_write_ns: int = 0      # mtime/ctime shown while writes are uncommitted
    committed_mtime: int = 0    # the master's mtime produced by our own last commit (see overlay)
    # (parent, name) while this mount's create made the inode and no commit has published it yet:
    # a failed first commit removes that name again (handles.Files.flush).
    created_as: tuple[int, str] | None = None


@dataclass(slots=True)
class FileHandle:
    fh: int
    open: OpenFile
    uid: int                    # the opener: non-root writers clear setuid/setgid (killpriv)
    writable: bool
    keep_cache: bool = False    # this open keeps the kernel's page cache (fuse/pagecache.py)
    new_content: bool = False   # this open found a content the kernel may not know: its attributes are stale
    # An O_APPEND open for writing, served as direct I/O (handles.py, "appends"): its first write
    # drops the file's security.capability, which the kernel's killpriv check would have done.
    appending: bool = False
    caps_dropped: bool = False


@dataclass(slots=True)
class DirHandle:
    """A directory listing in progress. Offsets handed to the kernel map to the entry name they
    follow, so a resumed listing continues after that name even if entries came or went."""
    fh: int
    ino: InodeId
    names: dict[int, str] = field(default_factory=dict)    # offset -> name of the entry at it
    next_offset: int = 3                                    # 1 and 2 are "." and ".."
    page_after: str | None = None                           # the cached page of the master listing
    page: list[DirEntry] = field(default_factory=list)
    page_index: dict[str, int] = field(default_factory=dict)
    page_more: bool = False
    attr: Attr | None = None                            # as of opendir: shown if it is removed


class Handles:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.files: dict[int, FileHandle] = {}
        self.dirs: dict[int, DirHandle] = {}
        self.open_files: dict[int, OpenFile] = {}

    def new_id(self) -> int:
        return next(self._ids)


class AttrCache:
    """Attributes the mount answers GETATTR from for up to `ttl` seconds (the attr timeout).

    Why: the kernel drops its own copy of a directory's attributes after every change inside it,
    then asks again to check search permission (default_permissions) on the next path walk: one
    master round trip per create. Answering from here keeps the promise the attr timeout already
    makes (attributes may be that old) while local changes keep it exact: every reply passes
    through `put`, and whatever a local operation changes is dropped or touched. The same
    invalidations reach the names of hot directories (`names`, fuse/names.py), so one set of calls
    keeps both exact.
    """

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic,
                 names: NameCache | None = None) -> None:
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[int, tuple[float, Attr]] = {}
        self.names = names if names is not None else NameCache(0.0)

    def get(self, ino: int) -> Attr | None:
        found = self._entries.get(ino)
        if found is None:
            return None
        if found[0] < self._clock():
            del self._entries[ino]
            return None
        return found[1]

    def put(self, attr: Attr) -> None:
        self.names.refresh(attr)
        if self.ttl > 0:
            if len(self._entries) > MAX_CACHED:
                self._entries.clear()
            self._entries[attr.ino] = (self._clock() + self.ttl, attr)

    def drop(self, ino: int) -> None:
        self._entries.pop(ino, None)
        self.names.forget_inode(ino)

    def clear(self) -> None:
        self._entries.clear()
        self.names.clear()

    def touch(self, ino: int, now_ns: int) -> None:
        """A directory gained or lost a non-directory entry: mtime and ctime move, nlink does not."""
        self.names.forget_directory(ino)
        found = self._entries.get(ino)
        if found is not None:
            moved = max(now_ns, found[1].mtime_ns)
            self._entries[ino] = (found[0], replace(found[1], mtime_ns=moved, ctime_ns=moved))


MAX_CACHED = 100_000
