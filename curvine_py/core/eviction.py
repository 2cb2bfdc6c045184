"""Eviction decisions for `cache`-class data (pure: the worker applies them).

Policy, as Curvine's quota eviction and JuiceFS's cache: nothing happens below the high watermark;
above it, expired entries go first, then least-recently-used cache entries, until usage is at or
below the low watermark. `durable` entries and pinned entries (being read, or just answered EXISTS
and inside the grace period) are never chosen. TTL expiry applies whatever the usage.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_HIGH_WATERMARK = 0.90
DEFAULT_LOW_WATERMARK = 0.75


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    size: int
    last_access_ms: int
    durable: bool            # durable-class data is never evicted (only its explicit TTL removes it)
    expires_at_ms: int = 0   # 0 = no TTL
    pinned: bool = False


def expired(candidate: Candidate, now_ms: int) -> bool:
    return candidate.expires_at_ms != 0 and candidate.expires_at_ms <= now_ms


def choose_victims(candidates: Iterable[Candidate], *, used: int, capacity: int, now_ms: int,
                   high: float = DEFAULT_HIGH_WATERMARK, low: float = DEFAULT_LOW_WATERMARK,
                   extra_needed: int = 0) -> list[Candidate]:
    """Names to delete, in order. `extra_needed` asks for room for an incoming write."""
    if not 0 < low <= high <= 1:
        raise ValueError(f"watermarks must satisfy 0 < low <= high <= 1, got {low}, {high}")
    evictable = [c for c in candidates if not c.durable and not c.pinned]
    victims = [c for c in evictable if expired(c, now_ms)]
    remaining = used + extra_needed - sum(c.size for c in victims)
    if remaining <= high * capacity:
        return victims
    target = low * capacity
    chosen = {c.name for c in victims}
    for candidate in sorted(evictable, key=lambda c: c.last_access_ms):
        if remaining <= target:
            break
        if candidate.name in chosen:
            continue
        victims.append(candidate)
        remaining -= candidate.size
    return victims
