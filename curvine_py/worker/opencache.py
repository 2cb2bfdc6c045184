"""The fd cache of the read path: the last OPEN_FILES stored files read stay open with their parsed
headers, keyed by inventory name and tied to the inventory entry they were opened for.

Why: a hit costs a `dup` instead of open + header read + parse, a fixed cost that dominates small
gets (bench kv; docs/benchmarks.md). Whatever removes or replaces an inventory entry calls `drop`,
so a deleted, evicted or replaced file is never served from here.

Concurrency: not thread-safe by itself; every call is made with the store lock held.
"""
from __future__ import annotations

import os
from collections import OrderedDict

from curvine_py.core import layout
from curvine_py.worker.storedfile import StoredFile

# Stored files kept open (with their parsed header) after a read, most recently read first: a hot
# object (a shared prompt prefix) is then served without open + header read + parse each time.
OPEN_FILES = 64


class OpenFileCache:
    def __init__(self, limit: int = OPEN_FILES) -> None:
        self.limit = limit
        # name -> (inventory entry it was opened for, fd, header, its size, the memo every open of
        # it shares: StoredFile.memo), LRU order.
        self._files: OrderedDict[str, tuple[object, int, layout.StoredHeader, int, dict[str, bytes]]] = OrderedDict()

    def get(self, name: str, entry: object) -> StoredFile | None:
        """A duplicate of the cached fd for `name` if it was opened for this very `entry`. The
        duplicate is made now (lock held): the cached fd may be closed by `drop` right after."""
        cached = self._files.get(name)
        if cached is None or cached[0] is not entry:
            return None
        self._files.move_to_end(name)
        return StoredFile(os.dup(cached[1]), cached[2], cached[3], cached[4])

    def keep(self, name: str, entry: object, fd: int, header: layout.StoredHeader) -> None:
        """Caches a duplicate of `fd` (the caller checked that `entry` is still the inventory's)."""
        previous = self._files.pop(name, None)
        if previous is not None:
            os.close(previous[1])
        self._files[name] = (entry, os.dup(fd), header, header.header_size, {})
        while len(self._files) > self.limit:
            _, (_, old_fd, _, _, _) = self._files.popitem(last=False)
            os.close(old_fd)

    def drop(self, name: str) -> None:
        cached = self._files.pop(name, None)
        if cached is not None:
            os.close(cached[1])

    def close(self) -> None:
        for _, fd, _, _, _ in self._files.values():
            os.close(fd)
        self._files.clear()
