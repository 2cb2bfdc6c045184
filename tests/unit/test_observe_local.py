"""observe/local.py: local counter and histogram families expose what prometheus-client's own
`Counter` and `Histogram` expose for the same increments and observations (their `_created`
samples aside) and refuse a wrong label and bad buckets. (The mount's access counts go through
observe/tally.py, tested in test_observe_tally.py.)"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.observe.local import LocalCounter, LocalHistogram
from curvine_py.observe.metrics import LATENCY_BUCKETS

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: CollectorRegistry) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


durations = st.lists(st.tuples(st.sampled_from(["lookup", "getattr", "read"]),
                               st.floats(min_value=0.0, max_value=30.0, allow_nan=False)), max_size=60)


@given(durations)
def test_histogram_exposes_what_prometheus_client_does(observations: list[tuple[str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    local = LocalHistogram("curvine_x_seconds", "x", "op", ours, LATENCY_BUCKETS)
    reference = Histogram("curvine_x_seconds", "x", ["op"], buckets=LATENCY_BUCKETS, registry=theirs)
    for op, seconds in observations:
        local.labels(op=op).observe(seconds)
        reference.labels(op=op).observe(seconds)
    got, want = samples(ours), samples(theirs)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key


def test_a_value_on_a_bound_falls_in_that_bucket() -> None:
    registry = CollectorRegistry()
    local = LocalHistogram("curvine_y_seconds", "y", "op", registry, (0.1, 1.0))
    for seconds in (0.1, 1.0, 5.0):
        local.labels(op="read").observe(seconds)
    s = samples(registry)
    assert s[("curvine_y_seconds_bucket", (("le", "0.1"), ("op", "read")))] == 1
    assert s[("curvine_y_seconds_bucket", (("le", "1.0"), ("op", "read")))] == 2
    assert s[("curvine_y_seconds_bucket", (("le", "+Inf"), ("op", "read")))] == 3
    assert s[("curvine_y_seconds_count", (("op", "read"),))] == 3
    assert s[("curvine_y_seconds_sum", (("op", "read"),))] == pytest.approx(6.1)


def test_counter_exposes_what_prometheus_client_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    local = LocalCounter("curvine_requests", "r", "op", ours)
    reference = Counter("curvine_requests", "r", ["op"], registry=theirs)
    for op, amount in (("lookup", 1), ("lookup", 1), ("read", 4096), ("write", 0.5)):
        local.labels(op=op).inc(amount)
        reference.labels(op=op).inc(amount)
    assert samples(ours) == samples(theirs)
    assert samples(ours)[("curvine_requests_total", (("op", "read"),))] == 4096


def test_wrong_labels_and_bad_buckets_are_refused() -> None:
    registry = CollectorRegistry()
    counter = LocalCounter("curvine_a", "a", "op", registry)
    with pytest.raises(ValueError, match="one label 'op'"):
        counter.labels(way="mount")
    with pytest.raises(ValueError, match="one label 'op'"):
        counter.labels(op="x", way="y")
    with pytest.raises(ValueError, match="increasing and distinct"):
        LocalHistogram("curvine_b_seconds", "b", "op", registry, (1.0, 0.5))
    with pytest.raises(ValueError, match="increasing and distinct"):
        LocalHistogram("curvine_c_seconds", "c", "op", registry, (0.5, 0.5))
    with pytest.raises(ValueError):     # the registry's own check: one name, one family
        LocalCounter("curvine_a", "again", "op", registry)
