"""Open-to-open validation of the kernel's page cache (as NFS and JuiceFS do): which opens may
keep what the kernel cached of a file (FOPEN_KEEP_CACHE) and which must drop it.

The rule: per inode, the version of the file's content as of the open that last dropped the
kernel's cache (after which reads refilled it): size, mtime, ctime and, when the open fetched the
block map, the block ids. An open whose version (fetched from the master at this open, so
close-to-open holds) is equal keeps the cache; any other open drops it and records its version.
The master moves ctime on every commit (and block ids change, writes are copy-on-write), so a
file committed on another node never matches. Whatever this mount does to a file's content
itself (a write, a truncate, a commit) forgets the version: the next open drops the cache.

Why not keep it after our own commit: writes through direct_io opens bypass the page cache, so
only forgetting is right for every way a write can arrive.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from curvine_py.core.domain import Attr, FileBlocks

MAX_TRACKED = 100_000     # inodes remembered; past it the table starts over (opens then drop once)


@dataclass(frozen=True, slots=True)
class Version:
    """What identifies one committed content of a file, as the master shows it."""
    size: int
    mtime_ns: int
    ctime_ns: int
    blocks: tuple[tuple[int, int], ...] | None   # (index, block id); None: not fetched at this open

    @classmethod
    def of_attr(cls, attr: Attr) -> Version:
        return cls(attr.size, attr.mtime_ns, attr.ctime_ns, None)

    @classmethod
    def of_blocks(cls, reply: FileBlocks) -> Version:
        blocks = tuple(sorted((b.index, b.block_id) for b in reply.blocks))
        return cls(reply.attr.size, reply.attr.mtime_ns, reply.attr.ctime_ns, blocks)

    def same_content(self, other: Version) -> bool:
        # A re-open of a file already open here refreshes its map inside the client, so it knows
        # the attributes only; ctime alone moves on every commit, the block ids are a second check.
        if (self.size, self.mtime_ns, self.ctime_ns) != (other.size, other.mtime_ns, other.ctime_ns):
            return False
        return self.blocks is None or other.blocks is None or self.blocks == other.blocks


class CacheVersions:
    """ino -> the Version the kernel's page cache holds (see the module docstring)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._versions: dict[int, Version] = {}

    def at_open(self, ino: int, version: Version | None, *, drop: bool = False) -> bool:
        """True: this open may keep the kernel's cache. False: it drops it, and `version` (None:
        a content this mount cannot name, such as uncommitted writes) is what it will hold.
        `drop`: the caller wants this open's reads to reach the mount (an atime to move)."""
        if not self.enabled:
            return False
        known = self._versions.get(ino)
        if not drop and version is not None and known is not None and known.same_content(version):
            return True
        if version is None:
            self._versions.pop(ino, None)
            return False
        if len(self._versions) >= MAX_TRACKED:
            self._versions.clear()
        self._versions[ino] = version
        return False

    def forget(self, ino: int) -> None:
        """This mount changed the file's content (write, truncate, commit): the next open drops."""
        self._versions.pop(ino, None)

    def __contains__(self, ino: int) -> bool:
        return ino in self._versions


@dataclass(slots=True)
class RequestCounters:
    """Requests that reached the mount, for tests and `getfattr -n user.curvine.stats MOUNT`:
    a READ answered from the kernel's page cache never arrives, so `reads` counts what crossed FUSE."""
    opens: int = 0
    opens_kept_cache: int = 0     # opens answered with keep_cache
    reads: int = 0
    read_bytes: int = 0
    writes: int = 0

    def as_json(self, extra: dict[str, object] | None = None) -> bytes:
        """These counters, with `extra` keys beside them (the chunk runs': fuse/prefetch.py)."""
        return json.dumps({**asdict(self), **(extra or {})}, sort_keys=True).encode("utf-8")


STATS_XATTR = "user.curvine.stats"     # read on the mount's root: RequestCounters.as_json
