"""Hot-path access counts (lookups answered, payload bytes in and out) kept per writer thread and
added to the shared Prometheus counters at scrape time (observe/metrics.py ScrapeHooks) and when
the writer ends: a worker's data connections each keep one, the mount's trio thread one for the
mount's way.

Why: a counter's `inc` is four Python calls and a lock; a GET made two of them (a hit, the bytes
sent), a sizeable share of the ~75 calls a small GET costs the worker (bench/kv_profile.py). An
attribute increment on the connection's own object is no call at all.

Concurrency: each `KvTally` is written by its connection's thread only; `fold` (the scrape's
thread) reads it under the tallies' lock and remembers what it has added, so nothing is counted
twice or lost, and a scrape sees every request answered before it (a read of an int is atomic).
"""
from __future__ import annotations

import threading

from prometheus_client import Counter

_FIELDS = ("hits", "misses", "sent", "received")


class KvTally:
    """One connection's counts since it opened, and the part of them already folded."""
    __slots__ = ("_folded", "hits", "misses", "received", "sent")

    def __init__(self) -> None:
        self.hits = self.misses = self.sent = self.received = 0
        self._folded = [0, 0, 0, 0]


class Tallies:
    """The live connections' tallies of one worker, folded into its counters (label children)."""

    def __init__(self, hits: Counter, misses: Counter, sent: Counter, received: Counter) -> None:
        self._counters = (hits, misses, sent, received)
        self._lock = threading.Lock()
        self._live: set[KvTally] = set()

    def open(self) -> KvTally:
        tally = KvTally()
        with self._lock:
            self._live.add(tally)
        return tally

    def close(self, tally: KvTally) -> None:
        with self._lock:
            self._fold(tally)
            self._live.discard(tally)

    def fold(self) -> None:
        with self._lock:
            for tally in self._live:
                self._fold(tally)

    def _fold(self, tally: KvTally) -> None:
        folded = tally._folded
        for index, name in enumerate(_FIELDS):
            now = getattr(tally, name)
            if now != folded[index]:
                self._counters[index].inc(now - folded[index])
                folded[index] = now
