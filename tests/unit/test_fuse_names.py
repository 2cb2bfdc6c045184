"""NameCache (fuse/names.py): when a directory turns hot, what is served, for how long, what every
invalidation drops, and the backoff for directories where prefetching does not pay."""
from __future__ import annotations

from dataclasses import replace

import pytest

from curvine_py.core.domain import Attr, DirEntry, InodeId, blank_attr
from curvine_py.fuse import names
from curvine_py.fuse.names import NameCache

DIR = 10


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def page(names: range, *, size: int = 0) -> list[DirEntry]:
    return [DirEntry(f"f{i}", replace(blank_attr(1000 + i), size=size)) for i in names]


def hot_cache(clock: Clock, **kwargs: int) -> NameCache:
    cache = NameCache(1.0, hot=4, clock=clock, **kwargs)
    assert [cache.should_fetch(DIR) for _ in range(4)] == [False, False, False, True]
    cache.fill(DIR, page(range(100)), cache.generation)
    return cache


def test_disabled_without_a_timeout() -> None:
    cache = NameCache(0.0, hot=1)
    assert not cache.should_fetch(DIR)
    assert cache.get(DIR, "f1") is None


def test_a_directory_turns_hot_only_with_enough_lookups_within_the_timeout() -> None:
    clock = Clock()
    cache = NameCache(1.0, hot=4, clock=clock)
    for _ in range(8):          # spread out: each lookup starts a new window
        assert not cache.should_fetch(DIR)
        clock.now += 1.1
    assert [cache.should_fetch(DIR) for _ in range(4)] == [False, False, False, True]


def test_held_names_are_served_with_their_age_until_the_timeout() -> None:
    clock = Clock()
    cache = hot_cache(clock)
    clock.now += 0.25
    held = cache.get(DIR, "f7")
    assert held is not None and held[0].ino == 1007 and held[1] == 0.25
    assert cache.get(DIR, "missing") is None, "positive answers only: anything else asks the master"
    assert cache.get(DIR + 1, "f7") is None
    clock.now += 0.75
    assert cache.get(DIR, "f7") is None, "expired at the timeout"
    assert len(cache) == 99


def test_every_invalidation_drops_what_it_touches() -> None:
    clock = Clock()
    cache = hot_cache(clock)
    cache.forget_inode(1003)
    assert cache.get(DIR, "f3") is None and cache.get(DIR, "f4") is not None
    cache.refresh(replace(blank_attr(1004), size=77))
    held = cache.get(DIR, "f4")
    assert held is not None and held[0].size == 77
    cache.forget_directory(DIR)
    assert cache.get(DIR, "f5") is None and len(cache) == 0
    cache = hot_cache(clock)
    cache.clear()
    assert cache.get(DIR, "f5") is None and len(cache) == 0


def test_a_page_that_raced_with_a_local_change_is_thrown_away() -> None:
    cache = NameCache(1.0, hot=1, clock=Clock())
    assert cache.should_fetch(DIR)
    generation = cache.generation
    cache.forget_directory(DIR)          # e.g. an unlink here while the page was in flight
    cache.fill(DIR, page(range(10)), generation)
    assert cache.get(DIR, "f1") is None


def test_a_directory_where_pages_do_not_pay_backs_off_and_recovers() -> None:
    clock = Clock()
    cache = hot_cache(clock)            # 100 names fetched, none used
    assert [cache.should_fetch(DIR) for _ in range(4)] == [False, False, False, False]
    assert [cache.should_fetch(DIR) for _ in range(16)][-1], "threshold grew fourfold"
    cache.fill(DIR, page(range(100, 200)), cache.generation)
    for i in range(100, 120):           # this page pays (20% used)
        assert cache.get(DIR, f"f{i}") is not None
    assert [cache.should_fetch(DIR) for _ in range(16)][-1], "still 16 at the evaluation"
    cache.fill(DIR, page(range(200, 300)), cache.generation)
    for i in range(200, 220):
        assert cache.get(DIR, f"f{i}") is not None
    assert [cache.should_fetch(DIR) for _ in range(4)][-1], "back to the base threshold"


def test_capacity_bounds_memory() -> None:
    cache = NameCache(1.0, hot=1, capacity=150, clock=Clock())
    cache.fill(DIR, page(range(100)), cache.generation)
    assert len(cache) == 100
    cache.fill(DIR + 1, page(range(100)), cache.generation)
    assert len(cache) == 0


def test_directories_tracked_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(names, "MAX_DIRECTORIES", 100)
    cache = NameCache(1.0, hot=2, clock=Clock())
    cache.fill(DIR, page(range(10)), cache.generation)
    for parent in range(1000, 1200):    # a walk over many directories, one lookup each
        cache.should_fetch(parent)
    assert len(cache._dirs) <= 100
    assert cache.get(DIR, "f1") is None, "dropped together with the counters"


def fetches_in_a_burst(cache: NameCache, changes: int) -> int:
    """An unlink burst: each change's LOOKUP (a master lookup, maybe with a page), then the
    change, which drops the directory's names."""
    fetched = 0
    for i in range(changes):
        if cache.should_fetch(DIR):
            fetched += 1
            cache.fill(DIR, page(range(i + 1, i + 101)), cache.generation)
        assert cache.get(DIR, f"f{i}") is None    # the name the kernel looks up was never held
        cache.forget_directory(DIR)
    return fetched


def test_pages_dropped_by_local_changes_before_they_paid_back_off() -> None:
    # hot=4: without the backoff this burst would fetch a page every 4 lookups (100 pages)
    fetched = fetches_in_a_burst(NameCache(1.0, hot=4, clock=Clock()), 400)
    assert 2 <= fetched <= 5, fetched


def test_a_page_thrown_away_after_a_race_counts_as_not_paying() -> None:
    cache = NameCache(1.0, hot=4, clock=Clock())
    assert [cache.should_fetch(DIR) for _ in range(4)] == [False, False, False, True]
    generation = cache.generation
    cache.forget_directory(DIR)                      # the race
    cache.fill(DIR, page(range(10)), generation)     # thrown away
    assert cache.get(DIR, "f1") is None
    assert [cache.should_fetch(DIR) for _ in range(4)] == [False] * 4, "judged: did not pay"
    assert [cache.should_fetch(DIR) for _ in range(16)][-1], "threshold grew fourfold: 16"


def test_a_page_that_paid_before_a_change_keeps_the_base_threshold() -> None:
    clock = Clock()
    cache = hot_cache(clock)                 # 100 names held
    for i in range(20):                      # 20% used, then a local change drops the rest
        assert cache.get(DIR, f"f{i}") is not None
    cache.forget_directory(DIR)
    assert [cache.should_fetch(DIR) for _ in range(4)] == [False, False, False, True]


def test_a_fetched_page_builds_only_the_attributes_it_serves() -> None:
    """Entries off the wire build their Attr when first read (DirEntry.deferred): filling a page
    and dropping or indexing its names reads only names and inode numbers."""
    built: list[int] = []

    def convert(ino: int) -> Attr:
        built.append(ino)
        return replace(blank_attr(InodeId(ino)), size=ino)

    cache = NameCache(1.0, hot=1, clock=Clock())
    assert cache.should_fetch(DIR)
    cache.fill(DIR, [DirEntry.deferred(f"f{i}", InodeId(1000 + i), convert, 1000 + i) for i in range(100)],
               cache.generation)
    assert built == [] and len(cache) == 100
    held = cache.get(DIR, "f7")
    assert held is not None and held[0].size == 1007 and built == [1007]
    cache.forget_inode(InodeId(1008))          # found by inode number: still nothing built
    assert cache.get(DIR, "f8") is None and built == [1007]
    cache.refresh(replace(blank_attr(InodeId(1009)), size=5))
    held = cache.get(DIR, "f9")
    assert held is not None and held[0].size == 5 and built == [1007]
