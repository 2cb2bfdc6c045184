"""observe/roles.py without processes: the ready-line fields, the status cache with an injected
clock, the worker's data-dir gauges read through the dirs' own `pressure()`, the flags' checks."""
from __future__ import annotations

import argparse
import contextlib

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.core.errors import InvalidArgument
from curvine_py.observe import roles
from curvine_py.observe.statusview import StatusView, unavailable_view


def test_ready_fields() -> None:
    assert roles.ready_field("metrics", "127.0.0.1", 9100) == " metrics=127.0.0.1:9100"
    assert roles.ready_field("status", "::1", 80) == " status=[::1]:80"
    assert roles.ready_field("metrics", "127.0.0.1", 0) == ""


def test_flags_parse_and_are_documented() -> None:
    parser = argparse.ArgumentParser()
    roles.add_metrics_flag(parser)
    roles.add_status_flag(parser)
    args = parser.parse_args(["--metrics-port", "-1", "--status-port", "8080"])
    assert (args.metrics_port, args.status_port) == (-1, 8080)
    assert parser.parse_args([]).metrics_port is None     # the config's default applies
    assert "0 = off" in parser.format_help()


def view(epoch: int) -> StatusView:
    return StatusView("c", epoch, (), 0, 0, 0, 0, 0, 0, 0)


def test_status_cache_serves_a_young_view_and_never_keeps_an_error() -> None:
    now = [100.0]
    calls: list[StatusView] = []
    answers = [view(1), view(2), unavailable_view("m", "down"), view(3), view(4)]

    def source() -> StatusView:
        calls.append(answers[len(calls)])
        return calls[-1]

    cached = roles.cached(source, max_age_s=1.0, clock=lambda: now[0])
    assert cached().epoch == 1
    now[0] += 0.5
    assert cached().epoch == 1 and len(calls) == 1      # young: not asked again
    now[0] += 0.6
    assert cached().epoch == 2
    now[0] += 1.0
    assert cached().error == "down"
    assert cached().epoch == 3                          # the error was not kept
    assert len(calls) == 4


class _Dir:
    def __init__(self, used: int, capacity: int) -> None:
        self.used, self.capacity = used, capacity

    def pressure(self) -> tuple[int, int]:
        return self.used, self.capacity


def test_worker_metrics_read_each_dirs_pressure_at_scrape_time() -> None:
    dirs = [_Dir(10, 100), _Dir(0, 50)]
    metrics = roles.worker_metrics(dirs)

    def gauges() -> dict[tuple[str, str], float]:
        text = generate_latest(metrics.registry).decode()
        return {(s.name, s.labels["dir"]): s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.name.startswith("curvine_data_dir")}

    assert gauges() == {("curvine_data_dir_capacity_bytes", "0"): 100, ("curvine_data_dir_used_bytes", "0"): 10,
                        ("curvine_data_dir_capacity_bytes", "1"): 50, ("curvine_data_dir_used_bytes", "1"): 0}
    dirs[1].used = 25
    assert gauges()[("curvine_data_dir_used_bytes", "1")] == 25


def test_bad_ports_are_refused_before_anything_starts() -> None:
    obs = roles.MasterObservability()
    with contextlib.ExitStack() as stack:
        with pytest.raises(InvalidArgument, match="--status-port"):
            obs.start(stack, host="127.0.0.1", metrics_port=0, status_port=70000, master_port=1, token="")
        with pytest.raises(InvalidArgument, match="--metrics-port"):
            roles.start_endpoint(stack, "127.0.0.1", -5, obs.metrics.registry)
        assert obs.start(stack, host="127.0.0.1", metrics_port=0, status_port=0, master_port=1, token="") == ""
        assert roles.start_endpoint(stack, "127.0.0.1", 0, obs.metrics.registry) == ""
