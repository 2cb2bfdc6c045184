"""observe/merged.py: a merged histogram exposes what prometheus-client's `Histogram` exposes for the
same observations (its `_created` samples aside), whether they came through locked children, live
single-writer parts or parts already retired; a part's counts are folded once, and parts written by
threads of their own add up exactly."""
from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from curvine_py.observe.merged import MergedHistogram
from curvine_py.observe.metrics import LATENCY_BUCKETS
from tests.unit.test_observe_local import samples  # the exposition as parsed, `_created` aside

observations = st.lists(st.tuples(st.sampled_from(["get", "put"]), st.sampled_from(["shared", "part", "retired"]),
                                  st.floats(min_value=0.0, max_value=30.0, allow_nan=False)), max_size=60)


@given(observations)
def test_it_exposes_what_prometheus_client_does(seen: list[tuple[str, str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    merged = MergedHistogram("curvine_x_seconds", "x", "op", ours, LATENCY_BUCKETS)
    reference = Histogram("curvine_x_seconds", "x", ["op"], buckets=LATENCY_BUCKETS, registry=theirs)
    parts = {op: merged.part(op) for op in ("get", "put")}
    doomed = {op: merged.part(op) for op in ("get", "put")}
    for op, how, seconds in seen:
        if how == "shared":
            merged.labels(op=op).observe(seconds)
        else:
            (parts if how == "part" else doomed)[op].observe(seconds)
        reference.labels(op=op).observe(seconds)
    for part in doomed.values():
        merged.retire(part)
    got, want = samples(ours), samples(theirs)
    assert set(want) <= set(got)
    for key, value in got.items():     # (a label with no observation yet reads 0, as it would there)
        assert value == pytest.approx(want.get(key, 0.0)), key


def test_a_retired_part_counts_once_and_a_second_retire_changes_nothing() -> None:
    registry = CollectorRegistry()
    merged = MergedHistogram("curvine_y_seconds", "y", "op", registry, (0.1, 1.0))
    part = merged.part("read")
    for seconds in (0.1, 1.0, 5.0):
        part.observe(seconds)
    before = samples(registry)
    merged.retire(part)
    merged.retire(part)
    assert samples(registry) == before
    assert before[("curvine_y_seconds_bucket", (("le", "0.1"), ("op", "read")))] == 1
    assert before[("curvine_y_seconds_bucket", (("le", "1.0"), ("op", "read")))] == 2
    assert before[("curvine_y_seconds_count", (("op", "read"),))] == 3
    assert before[("curvine_y_seconds_sum", (("op", "read"),))] == pytest.approx(6.1)


def test_parts_of_many_threads_and_a_shared_child_add_up_exactly() -> None:
    registry = CollectorRegistry()
    merged = MergedHistogram("curvine_z_seconds", "z", "op", registry, LATENCY_BUCKETS)

    def connection() -> None:
        part = merged.part("get")
        for _ in range(2000):
            part.observe(0.0003)
            merged.labels(op="get").observe(0.02)
        merged.retire(part)

    threads = [threading.Thread(target=connection) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    s = samples(registry)
    assert s[("curvine_z_seconds_count", (("op", "get"),))] == 16000
    assert s[("curvine_z_seconds_bucket", (("le", "0.0005"), ("op", "get")))] == 8000


def test_a_wrong_label_and_bad_buckets_are_refused() -> None:
    registry = CollectorRegistry()
    merged = MergedHistogram("curvine_w_seconds", "w", "op", registry, (0.1, 1.0))
    with pytest.raises(ValueError, match="one label"):
        merged.labels(way="kv")
    with pytest.raises(ValueError, match="increasing"):
        MergedHistogram("curvine_v_seconds", "v", "op", registry, (1.0, 0.1))
    with pytest.raises(ValueError, match="Duplicated"):
        MergedHistogram("curvine_w_seconds", "w", "op", registry, (0.1, 1.0))
