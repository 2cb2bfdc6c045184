"""Eviction decisions: watermarks, TTL, LRU order, durable and pinned data never chosen."""
from __future__ import annotations

import pytest

from curvine_py.core.eviction import Candidate, choose_victims


def c(name: str, size: int = 10, access: int = 0, durable: bool = False, expires: int = 0, pinned: bool = False) -> Candidate:
    return Candidate(name, size, access, durable, expires, pinned)


def names(victims: list[Candidate]) -> list[str]:
    return [v.name for v in victims]


def test_nothing_below_the_high_watermark() -> None:
    assert choose_victims([c("a"), c("b")], used=89, capacity=100, now_ms=0) == []


def test_lru_down_to_the_low_watermark() -> None:
    items = [c("new", access=30), c("old", access=10), c("mid", access=20)]
    assert names(choose_victims(items, used=95, capacity=100, now_ms=0, high=0.9, low=0.75)) == ["old", "mid"]


def test_durable_and_pinned_are_never_victims() -> None:
    items = [c("d", durable=True, access=0), c("p", pinned=True, access=1), c("x", access=5)]
    assert names(choose_victims(items, used=100, capacity=100, now_ms=0)) == ["x"]


def test_expired_go_first_even_below_the_watermark() -> None:
    items = [c("fresh", access=0, expires=500), c("stale", access=9, expires=100), c("forever", access=0)]
    assert names(choose_victims(items, used=10, capacity=100, now_ms=200)) == ["stale"]


def test_room_for_an_incoming_write() -> None:
    items = [c("a", size=30, access=1), c("b", size=30, access=2)]
    assert names(choose_victims(items, used=60, capacity=100, now_ms=0, extra_needed=35)) == ["a"]


def test_bad_watermarks_are_refused() -> None:
    with pytest.raises(ValueError):
        choose_victims([], used=0, capacity=1, now_ms=0, high=0.5, low=0.9)
