"""Applies the eviction policy (core/eviction.py) to the store: periodically (TTL expiry whatever
the usage, LRU above the high watermark down to the low one) and on demand when a write lacks room.

Durable entries and pinned entries (EXISTS pin=true, inside the grace period) are never chosen.
Readers that already hold a file open keep reading it after an eviction (Linux unlink semantics).
Evicted blocks are queued in the store and reported to the master by the next heartbeat.

Error handling: a pass that fails (a data dir that cannot be stat'ed, a bug) is logged, rate-limited
(throttle.py), and the next pass runs as usual; `failures` counts the passes that failed in a row.
The loop's clock is injected (`clock`: monotonic seconds, for the log throttle); tests call `tick()`
instead of running the thread.

Every eviction is counted in `curvine_evictions_total` by reason: `ttl` (expired), `watermark`
(the periodic pass above the high watermark), `space` (on demand, for a write).
"""
from __future__ import annotations

import logging
import threading
import time

from prometheus_client import CollectorRegistry

from curvine_py.core.eviction import choose_victims
from curvine_py.observe.metrics import WorkerMetrics, register_worker
from curvine_py.worker.store import Store
from curvine_py.worker.throttle import DEFAULT_INTERVAL_S as LOG_INTERVAL_S
from curvine_py.worker.throttle import LogThrottle, Monotonic

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0   # TTL granularity; cheap: a pass over the in-memory inventory


class Evictor:
    def __init__(self, store: Store, *, high: float, low: float, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Monotonic = time.monotonic, log_interval_s: float = LOG_INTERVAL_S,
                 metrics: WorkerMetrics | None = None) -> None:
        if not 0 < low <= high <= 1:
            raise ValueError(f"watermarks must satisfy 0 < low <= high <= 1, got {low}, {high}")
        self._store = store
        self._high = high
        self._low = low
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._throttle = LogThrottle(log_interval_s, clock)
        self.failures = 0   # passes that failed in a row
        self._metrics = metrics or register_worker(CollectorRegistry())
        store.attach_reclaimer(self.make_room)

    def make_room(self, dir_index: int, needed: int) -> int:
        """On demand, for a write of `needed` bytes into `dir_index`; returns entries evicted.
        Evicts nothing when even evicting every candidate would not make the write fit (the
        write gets ENOSPC without wiping the cache for nothing)."""
        store = self._store
        with store.lock:
            used, capacity = store.dirs[dir_index].pressure()
            candidates = store.candidates(dir_index)
            evictable = sum(c.size for c in candidates if not c.durable and not c.pinned)
            if used + needed - evictable > capacity:
                return 0
            victims = choose_victims(candidates, used=used, capacity=capacity, now_ms=store.clock(),
                                     high=self._high, low=self._low, extra_needed=needed)
            evicted = store.evict(v.name for v in victims)
        self._metrics.evicted("space", evicted)
        if evicted:
            log.info("evicted %d entries from %s to make room for %d bytes", evicted,
                     store.dirs[dir_index].path, needed)
        return evicted

    def run_once(self) -> int:
        """One periodic pass; returns entries evicted. Expired entries come from the store's
        expiry heap; the full LRU scan runs only for a dir above its high watermark, so a pass
        over a large, calm inventory costs almost nothing under the store lock."""
        store = self._store
        with store.lock:
            expired = store.evict(store.due_expiries())
        self._metrics.evicted("ttl", expired)
        if expired:
            log.info("expired %d entries", expired)
        total = expired
        for index, data_dir in enumerate(store.dirs):
            with store.lock:
                used, capacity = data_dir.pressure()
                if used <= self._high * capacity:
                    continue
                victims = choose_victims(store.candidates(index), used=used, capacity=capacity,
                                         now_ms=store.clock(), high=self._high, low=self._low)
                evicted = store.evict(v.name for v in victims)
            self._metrics.evicted("watermark", evicted)
            log.info("evicted %d entries from %s (above the high watermark)", evicted, data_dir.path)
            total += evicted
        return total

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="evictor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def tick(self) -> int:
        """One pass of the background loop: `run_once`, whose failure is logged (rate-limited) and
        counted instead of ending the loop. Returns entries evicted."""
        try:
            evicted = self.run_once()
        except Exception:
            self.failures += 1
            suppressed = self._throttle.allow("pass")
            if suppressed is not None:
                log.exception("eviction pass failed (%d in a row, %d similar lines suppressed)",
                              self.failures, suppressed)
            return 0
        if self.failures:
            log.info("eviction passes work again after %d failed ones", self.failures)
            self._throttle.reset("pass")
            self.failures = 0
        return evicted

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.tick()
