"""TTL bookkeeping: a heap of (expires_at_ms, name) for the entries that have a TTL, so the periodic
eviction pass finds expired entries without scanning the inventory. Stale items (the entry is gone,
or was replaced by a copy with another TTL, which has its own item) are skipped lazily.

Concurrency: not thread-safe by itself; every call is made with the store lock held.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol


class Expiring(Protocol):
    @property
    def expires_at_ms(self) -> int: ...
    @property
    def pinned_until_ms(self) -> int: ...
    def expired(self, now_ms: int) -> bool: ...


class ExpiryQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []

    def push(self, expires_at_ms: int, name: str) -> None:
        heapq.heappush(self._heap, (expires_at_ms, name))

    def due(self, now: int, lookup: Callable[[str], Expiring | None]) -> list[str]:
        """Names of entries whose TTL has passed (durable ones included: a TTL is explicit),
        except pinned ones, which are looked at again when their pin ends."""
        due: dict[str, None] = {}   # ordered and deduplicated (an entry may have two items)
        deferred: list[tuple[int, str]] = []
        while self._heap and self._heap[0][0] <= now:
            _, name = heapq.heappop(self._heap)
            entry = lookup(name)
            if entry is None or not entry.expired(now):
                continue   # gone, or replaced by a copy without/with a later TTL (its own item)
            if entry.pinned_until_ms > now:
                deferred.append((entry.pinned_until_ms, name))
            else:
                due[name] = None
        for item in deferred:
            heapq.heappush(self._heap, item)
        return list(due)
