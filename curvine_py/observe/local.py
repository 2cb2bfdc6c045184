"""Counter and histogram families for a hot path that one thread writes (the mount's trio thread):
a child is a plain attribute or list that the writer bumps, and the scrape builds the families from
them. The names, labels and exposition are those of prometheus-client's `Counter` and `Histogram`
(`NAME_total`; `NAME_bucket{le}`, `NAME_count`, `NAME_sum`), and the API is the part of theirs the
code uses: `labels(**one_label).inc(n)` and `.observe(seconds)`.

Why: prometheus-client's `inc` and `observe` are four Python calls and a lock each; a mount `stat`
(a LOOKUP and a GETATTR) paid 14 of its 127 Python calls there, the largest part of what it cost
more since the request metrics came (bench.fuse_calls). Here `inc` is one
call and an add, `observe` one call, a C bisect and two adds.

Concurrency: each child has one writer thread. The scrape thread only reads: an int or a float
read is atomic under the GIL, and a histogram's count is the sum of its buckets as read, so a
scrape is consistent in itself (its `_sum` may miss the observation in flight). Two writer threads
on one child could lose an increment (`+=` is a read and a write): do not share a child.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class HistogramChild:
    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)   # the last one: +Inf
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # le semantics: the first bucket whose upper bound is >= the value.
        self.counts[bisect.bisect_left(self._bounds, amount)] += 1
        self.sum += amount


class _Family(Collector):
    """One family with one label; children made on first use (the label value is code-defined)."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        registry.register(self)

    def _label_value(self, labels: dict[str, str]) -> str:
        if set(labels) != {self.label}:
            raise ValueError(f"{self.name} takes the one label {self.label!r}, got {sorted(labels)}")
        return labels[self.label]

    def describe(self) -> Iterable[Metric]:
        # The family without samples: the registry takes its names from this at registration, so
        # a second family of the same name is refused there, as prometheus-client's own are.
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError


class LocalCounter(_Family):
    """`NAME_total{label}` from children that one thread increments."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry) -> None:
        self._children: dict[str, CounterChild] = {}
        super().__init__(name, documentation, label, registry)

    def labels(self, **labels: str) -> CounterChild:
        value = self._label_value(labels)
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = CounterChild()
        return child

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=[self.label])

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for value, child in list(self._children.items()):
            family.add_metric([value], child.value)
        return [family]


class HistogramFamily(_Family):
    """What a histogram family of one label shares, however its children are kept (here, and
    observe/merged.py's): checked buckets, the family's names, and the exposition of per-bucket
    counts as prometheus-client's `Histogram` renders them."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry,
                 buckets: Sequence[float]) -> None:
        bounds = tuple(float(b) for b in buckets if not math.isinf(b))
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must be increasing and distinct: {buckets!r}")
        self._bounds = bounds
        super().__init__(name, documentation, label, registry)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=[self.label])

    def _render(self, rows: Iterable[tuple[str, Sequence[int], float]]) -> HistogramMetricFamily:
        """The family of (label value, per-bucket counts with +Inf last, sum) rows."""
        family = self._family()
        bounds = (*self._bounds, math.inf)
        for value, counts, total in rows:
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, counts, strict=True):
                cumulative += count
                buckets.append((_le(bound), float(cumulative)))
            family.add_metric([value], buckets, total)
        return family


class LocalHistogram(HistogramFamily):
    """`NAME_bucket{label,le}`, `NAME_count`, `NAME_sum` from children that one thread observes."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry,
                 buckets: Sequence[float]) -> None:
        self._children: dict[str, HistogramChild] = {}
        super().__init__(name, documentation, label, registry, buckets)

    def labels(self, **labels: str) -> HistogramChild:
        value = self._label_value(labels)
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = HistogramChild(self._bounds)
        return child

    def collect(self) -> Iterable[Metric]:
        # One read of each bucket (list()): the count is their sum, so a scrape is consistent.
        return [self._render((value, list(child.counts), child.sum)
                             for value, child in list(self._children.items()))]


def _le(bound: float) -> str:
    # prometheus-client's own spelling of a bucket bound ("0.0001", "1.0", "+Inf").
    return "+Inf" if math.isinf(bound) else repr(float(bound))
