"""Names of hot directories, fetched from the master a page at a time.

Why: with the kernel's entry cache expired, every `stat` of a name is a LOOKUP, and every LOOKUP a
master round trip (`bench fuse`: the library, asking one name per call, does ~1.3-1.4k lookups/s
on the 2-core bench machine). Programs that stat many
names of one directory (mdtest, `find`, LMCache's fs:// backend polling its chunk files) pay that
per name. When a directory turns hot (`hot` master lookups within one entry timeout), the mount
asks for the next page of names after the one just looked up, with their attributes, in one
ReadDir call, and answers later lookups of those names from here.

The promise stays the one the entry timeout already makes (ARCHITECTURE.md "Semantics"):
- positive answers only: a name not held here goes to the master, so a name created on another
  node is seen at once (no negative caching, which LMCache's polling depends on);
- an entry is served for at most `ttl` seconds after it was fetched, and the caller shortens the
  kernel's timeouts by its age, so no answer is ever older than the entry timeout;
- every local change drops what it touches (the attribute cache forwards its invalidations here),
  and an ESTALE anywhere drops everything, so a replaced inode is re-resolved at the master.

Directories where prefetching does not pay (random lookups in a huge directory hit few of the
fetched names) back off: their threshold grows fourfold each time a page earned under a tenth of
its names in hits (a page dropped by a local change before it paid, or thrown away because one
raced with it, counts as not paying), and returns to `hot` when a page pays.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from curvine_py.core.domain import Attr, DirEntry

HOT_LOOKUPS = 16        # master lookups in one directory within the ttl that make it hot
PAGE = 512              # names fetched per prefetch (the master's page)
MAX_THRESHOLD = 4096
CAPACITY = 65_536       # names held in all; beyond it everything is dropped (cheap, rare)
MAX_DIRECTORIES = 16_384   # directories tracked (lookup counters included); beyond it, the same


@dataclass(slots=True)
class _Directory:
    # name -> (fetched, entry). Entries, not their Attrs: a page's entries build their Attr when
    # first read (core DirEntry.deferred), and most names of most pages are never served.
    names: dict[str, tuple[float, DirEntry]] = field(default_factory=dict)
    window_start: float = 0.0
    misses: int = 0
    threshold: int = HOT_LOOKUPS
    fetched: int = 0     # names in the last page
    hits: int = 0        # answers given from it since


class NameCache:
    def __init__(self, ttl: float, *, hot: int = HOT_LOOKUPS, page: int = PAGE, capacity: int = CAPACITY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.hot = hot
        self.page = page
        self.capacity = capacity
        self._clock = clock
        self._dirs: dict[int, _Directory] = {}
        self._where: dict[int, set[tuple[int, str]]] = {}   # ino -> (directory, name) holding it
        self._size = 0
        self.generation = 0     # bumped by every invalidation (see `fill`)

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    def get(self, parent: int, name: str) -> tuple[Attr, float] | None:
        """(attributes, age in seconds) of a name fetched less than ttl ago, else None."""
        directory = self._dirs.get(parent)
        if directory is None:
            return None
        found = directory.names.get(name)
        if found is None:
            return None
        age = self._clock() - found[0]
        if age >= self.ttl:
            self._remove(parent, name)
            return None
        directory.hits += 1
        return found[1].attr, age

    def should_fetch(self, parent: int) -> bool:
        """Counts one master lookup in `parent`; True when the directory just turned hot (the
        caller then fetches a page after the name it looked up and `fill`s it in)."""
        if not self.enabled:
            return False
        directory = self._dirs.get(parent)
        if directory is None:
            if len(self._dirs) >= MAX_DIRECTORIES:     # a tree walk: forget the counters too
                self.clear()
            directory = self._dirs[parent] = _Directory(threshold=self.hot)
        now = self._clock()
        if now - directory.window_start > self.ttl:
            directory.window_start, directory.misses = now, 0
        directory.misses += 1
        if directory.misses < directory.threshold:
            return False
        directory.misses = 0
        if directory.fetched:
            paid = directory.hits * 10 >= directory.fetched
            directory.threshold = self.hot if paid else min(directory.threshold * 4, MAX_THRESHOLD)
            directory.fetched = directory.hits = 0
            if not paid:
                return False
        return True

    def fill(self, parent: int, entries: Iterable[DirEntry], generation: int) -> None:
        """Adds a page fetched while `generation` was current; a page that raced with a local
        change (the generation moved on during the fetch) may predate it and is thrown away."""
        directory = self._dirs.setdefault(parent, _Directory(threshold=self.hot))
        if generation != self.generation:
            # Fetched for nothing: counts as a page that earned no hits, so a directory changed
            # here as fast as it is looked up (an unlink burst) backs off instead of fetching on.
            directory.fetched, directory.hits = max(directory.fetched, 1), 0
            return
        now = self._clock()
        count = 0
        for entry in entries:
            self._put(parent, directory, entry, now)
            count += 1
        directory.fetched, directory.hits = count, 0
        if self._size > self.capacity:
            self.clear()

    def refresh(self, attr: Attr) -> None:
        """A newer answer for an inode (a reply that passed through the attribute cache)."""
        now = self._clock()
        for parent, name in tuple(self._where.get(attr.ino, ())):
            self._put(parent, self._dirs[parent], DirEntry(name, attr), now)

    def forget_inode(self, ino: int) -> None:
        """The inode changed here: drop it under every name, and its own names if a directory."""
        self.generation += 1
        for parent, name in tuple(self._where.get(ino, ())):
            self._remove(parent, name)
        self.forget_directory(ino)

    def forget_directory(self, parent: int) -> None:
        """Names in `parent` changed here (an entry added, removed or renamed)."""
        self.generation += 1
        directory = self._dirs.get(parent)
        if directory is not None:
            for name in tuple(directory.names):
                self._remove(parent, name)
            # fetched/hits stay: a page dropped by a local change earned what it earned by then,
            # and the next evaluation (should_fetch) judges it by that. Reset here, an unlink
            # burst never backed off: every `hot` lookups fetched a page the next unlink dropped.

    def clear(self) -> None:
        self.generation += 1
        self._dirs.clear()
        self._where.clear()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _put(self, parent: int, directory: _Directory, entry: DirEntry, now: float) -> None:
        name = entry.name
        old = directory.names.get(name)
        if old is not None:
            self._unindex(old[1].ino, parent, name)
        else:
            self._size += 1
        directory.names[name] = (now, entry)
        self._where.setdefault(entry.ino, set()).add((parent, name))

    def _remove(self, parent: int, name: str) -> None:
        directory = self._dirs.get(parent)
        found = directory.names.pop(name, None) if directory is not None else None
        if found is not None:
            self._size -= 1
            self._unindex(found[1].ino, parent, name)

    def _unindex(self, ino: int, parent: int, name: str) -> None:
        places = self._where.get(ino)
        if places is not None:
            places.discard((parent, name))
            if not places:
                del self._where[ino]
