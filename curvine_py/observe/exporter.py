"""The Prometheus `/metrics` endpoint of a role: prometheus-client's own exposition handler over
one role's registry, on the server of httpserve.py (0 = off, -1 = any free port)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from curvine_py.observe.httpserve import HttpService, serve


def serve_metrics(host: str, port: int, registry: CollectorRegistry) -> HttpService | None:
    """The running exporter (close() stops it), or None when `port` is 0."""
    return serve(host, port, MetricsHandler.factory(registry), "metrics")


def start_metrics_server(host: str, port: int, registry: CollectorRegistry) -> int:
    """For a role's composition root: starts the exporter for the life of the process and returns
    the bound port (0 when off: nothing is started)."""
    service = serve_metrics(host, port, registry)
    return service.port if service else 0
