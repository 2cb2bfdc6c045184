"""What each role's composition root calls to get its metrics endpoint (and the master its status
page), so the roles' own code changes by a flag and a few lines.

- master: `MasterObservability()` before the gRPC server is built (its `interceptor` counts every
  RPC), `.start(...)` once the server serves: the exporter (membership gauges read at scrape time
  from the master's own `GetMembership`) and the status page (fed by `Report` and `GetPolicy`,
  cached for `STATUS_MIN_AGE_S` so that many open browsers cost one report per interval);
- worker: `worker_metrics(store.dirs)` (capacity and usage per data dir read at scrape time) and
  `start_metrics_server`;
- mount: `mount_metrics(operations)` before `pyfuse3.init` (FUSE requests by op).

Ports follow httpserve.py: 0 = off, -1 = any free port. A started endpoint adds ` metrics=HOST:PORT`
(` status=HOST:PORT`) to the role's ready line, as the worker's ` lm=` field, so tests and `up` can
bind -1 and read the port.
"""
from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry

from curvine_py.client.master import MasterClient
from curvine_py.observe.exporter import serve_metrics
from curvine_py.observe.fusemetrics import instrument
from curvine_py.observe.httpserve import check_port
from curvine_py.observe.metrics import (
    ClusterGauges,
    DataDirUsage,
    MountMetrics,
    WorkerMetrics,
    register_master,
    register_mount,
    register_worker,
)
from curvine_py.observe.rpcmetrics import RpcMetricsInterceptor
from curvine_py.observe.status import StatusSource, master_source, serve_status
from curvine_py.observe.statusview import StatusView
from curvine_py.rpc.tls import TlsFiles

STATUS_REFRESH_S = 5     # the page reloads itself this often
STATUS_MIN_AGE_S = 1.0   # a report younger than this is served again (Report counts the namespace)
WILDCARDS = ("", "0.0.0.0", "::")

METRICS_HELP = "Prometheus /metrics port (0 = off, -1 = any free port; default 0)"
STATUS_HELP = "read-only HTML status page port (0 = off, -1 = any free port; default 0)"


def add_metrics_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=int, help=METRICS_HELP)


def add_metrics_host_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-host", help="address the /metrics (and status) ports bind, e.g. a "
                                               "management network's or 127.0.0.1 (default: --host)")


def add_status_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status-port", type=int, help=STATUS_HELP)


def endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def ready_field(name: str, host: str, port: int) -> str:
    """' name=HOST:PORT' for a started endpoint, '' for one that is off (port 0)."""
    return f" {name}={endpoint(host, port)}" if port else ""


def cached(source: StatusSource, max_age_s: float = STATUS_MIN_AGE_S,
           clock: Callable[[], float] = time.monotonic) -> StatusSource:
    """`source`, asked at most once per `max_age_s`; a view that reports an error is not kept."""
    last: list[tuple[float, StatusView]] = []

    def source_cached() -> StatusView:
        now = clock()
        if last and now - last[0][0] < max_age_s:
            return last[0][1]
        view = source()
        last[:] = [] if view.error else [(now, view)]
        return view

    return source_cached


class _HasPressure(Protocol):
    def pressure(self) -> tuple[int, int]:
        """(used, capacity) of a data dir."""
        ...


class MasterObservability:
    """Resource handling: `start` registers every endpoint and client it opens on `stack`."""

    def __init__(self) -> None:
        self._membership: Callable[[], ClusterGauges] | None = None
        self.metrics = register_master(CollectorRegistry(), cluster=lambda: self._gauges())
        self.interceptor = RpcMetricsInterceptor(self.metrics)
        self.metrics_port = 0   # bound by start (0 = off)
        self.status_port = 0

    def _gauges(self) -> ClusterGauges:
        if self._membership is None:
            raise RuntimeError("the master is not serving yet")
        return self._membership()

    def start(self, stack: contextlib.ExitStack, *, host: str, metrics_port: int, status_port: int,
              master_port: int, token: str, tls: TlsFiles | None = None, bind: str = "") -> str:
        """Starts the endpoints that are on, on `bind` (default `host`, the master's own address);
        returns the ready-line fields for them."""
        check_port(metrics_port, "--metrics-port")
        check_port(status_port, "--status-port")
        if not metrics_port and not status_port:
            return ""
        # The master asks itself through its public RPCs, as any client would.
        own = endpoint("127.0.0.1" if host in WILDCARDS else host, master_port)
        master = MasterClient(own, token=token, tls=tls)
        stack.callback(master.close)

        def gauges() -> ClusterGauges:
            view = master.membership()
            live = [w for w in view.workers if w.live]
            return ClusterGauges(epoch=view.epoch, live_workers=len(live),
                                 lost_workers=len(view.workers) - len(live),
                                 capacity=sum(w.capacity for w in live), used=sum(w.used for w in live))

        self._membership = gauges
        fields = ""
        bind = bind or host
        exporter = serve_metrics(bind, metrics_port, self.metrics.registry)
        if exporter is not None:
            stack.callback(exporter.close)
            fields += ready_field("metrics", bind, exporter.port)
            self.metrics_port = exporter.port
        page = serve_status(bind, status_port, cached(master_source(master)), refresh_s=STATUS_REFRESH_S)
        if page is not None:
            stack.callback(page.close)
            fields += ready_field("status", bind, page.port)
            self.status_port = page.port
        return fields


def worker_metrics(dirs: Sequence[_HasPressure]) -> WorkerMetrics:
    """The worker's families; capacity and usage of each of `dirs` are read at every scrape."""
    def usage() -> list[DataDirUsage]:
        out = []
        for index, data_dir in enumerate(dirs):
            used, capacity = data_dir.pressure()
            out.append(DataDirUsage(index, capacity, used))
        return out

    return register_worker(CollectorRegistry(), usage)


def mount_metrics(operations: object) -> MountMetrics:
    """The mount's families, with every FUSE handler of `operations` counted (fusemetrics.py)."""
    metrics = register_mount(CollectorRegistry())
    instrument(operations, metrics)
    return metrics


def start_exporter(stack: contextlib.ExitStack, host: str, port: int, registry: CollectorRegistry) -> int:
    """The exporter if `port` is on (closed by `stack`); the port it is bound to, 0 when off."""
    exporter = serve_metrics(host, check_port(port, "--metrics-port"), registry)
    if exporter is None:
        return 0
    stack.callback(exporter.close)
    return exporter.port


def start_endpoint(stack: contextlib.ExitStack, host: str, port: int, registry: CollectorRegistry) -> str:
    """For the worker and the mount: the exporter if `port` is on; its ready-line field."""
    return ready_field("metrics", host, start_exporter(stack, host, port, registry))
