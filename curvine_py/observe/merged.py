"""A histogram family with one label that many threads observe: a thread that observes on every
request (a worker's data connection) takes parts of its own, written without a lock, and any other
caller observes through a locked child; a scrape adds them up. Names, labels and exposition are
prometheus-client's `Histogram`'s (`NAME_bucket{label,le}`, `NAME_count`, `NAME_sum`, no `_created`),
as for observe/local.py's LocalHistogram, and so is the API the code uses:
`labels(**one_label).observe(seconds)`; `part(value)` gives a single-writer child, `retire(part)`
folds it into the family's totals once its writer is done.

Why: prometheus-client's `observe` is five Python calls and two locks; every data-plane request of
a worker made one (its duration by op), a measurable share of the ~58 calls a small get costs the
worker. A part's `observe` is one call, a C bisect and two adds.

Concurrency: a part has one writer thread; the scrape thread only reads it (an int or a float read
is atomic under the GIL, so a scrape is consistent in itself, its `_sum` may miss the observation
in flight). `retire` moves a part's counts into the totals under the family's lock: its writer
must not observe after it. Locked children serve any thread.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from curvine_py.observe.local import HistogramChild, HistogramFamily


class LockedChild(HistogramChild):
    """A child for callers on any thread (the lm:// server's connections, `AccessMetrics.timed`)."""
    __slots__ = ("_lock",)

    def __init__(self, bounds: tuple[float, ...]) -> None:
        super().__init__(bounds)
        self._lock = threading.Lock()

    def observe(self, amount: float) -> None:
        with self._lock:
            super().observe(amount)


class MergedHistogram(HistogramFamily):
    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry,
                 buckets: Sequence[float]) -> None:
        self._lock = threading.Lock()
        self._shared: dict[str, LockedChild] = {}
        self._parts: dict[HistogramChild, str] = {}      # live parts -> their label value
        self._retired: dict[str, HistogramChild] = {}    # what retired parts counted, by label value
        super().__init__(name, documentation, label, registry, buckets)

    def labels(self, **labels: str) -> LockedChild:
        value = self._label_value(labels)
        child = self._shared.get(value)
        if child is None:
            with self._lock:
                child = self._shared.setdefault(value, LockedChild(self._bounds))
        return child

    def part(self, value: str) -> HistogramChild:
        """A child for `value` that only the calling thread observes, until `retire`."""
        self._label_value({self.label: value})
        child = HistogramChild(self._bounds)
        with self._lock:
            self._parts[child] = value
        return child

    def retire(self, part: HistogramChild) -> None:
        """Folds a part into the totals (its writer observes no more); a second retire is a no-op."""
        with self._lock:
            value = self._parts.pop(part, None)
            if value is None:
                return
            total = self._retired.get(value)
            if total is None:
                total = self._retired[value] = HistogramChild(self._bounds)
            total.counts = [a + b for a, b in zip(total.counts, part.counts, strict=True)]
            total.sum += part.sum

    def collect(self) -> Iterable[Metric]:
        sums: dict[str, tuple[list[int], float]] = {}
        with self._lock:   # the set of children is stable meanwhile; their counts are read as they are
            children = [*self._shared.items(), *((v, c) for c, v in self._parts.items()), *self._retired.items()]
            for value, child in children:
                counts, total = sums.get(value, ([0] * (len(self._bounds) + 1), 0.0))
                sums[value] = ([a + b for a, b in zip(counts, list(child.counts), strict=True)], total + child.sum)
        return [self._render((value, counts, total) for value, (counts, total) in sums.items())]
