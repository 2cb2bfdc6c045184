"""The LMCache plugin's counters in the engine process it runs in: lookups as way `plugin` (hits
and misses) and payload bytes (received = the bytes of get hits, sent = the bytes of stored puts),
in observe/metrics.py's client families (`register_client`).

They live in prometheus-client's default registry, once per process: that is the registry an
engine process already exposes (vLLM's `/metrics`, LMCache's own Prometheus metrics), so the
plugin's counts appear beside the engine's without a port of its own. If those names are taken in
it already, the counters go to a private registry (logged once): counting never breaks serving.
"""
from __future__ import annotations

import logging
import threading

from prometheus_client import REGISTRY, CollectorRegistry

from curvine_py.observe.metrics import AccessMetrics, register_client

log = logging.getLogger(__name__)

_lock = threading.Lock()
_access: list[AccessMetrics] = []   # the process's one set, made on first use


def plugin_access() -> AccessMetrics:
    """The process's plugin counters (every connector instance of the process shares them)."""
    with _lock:
        if not _access:
            try:
                metrics = register_client(REGISTRY)
            except ValueError as exc:   # a name of ours is registered there by someone else
                log.warning("curvine plugin metrics kept in a private registry: %s", exc)
                metrics = register_client(CollectorRegistry())
            _access.append(metrics.access)
        return _access[0]


def prefix_lookup(access: AccessMetrics, hits: int, asked: int) -> None:
    """A prefix existence check: each key of the found prefix a hit, the first absent key a miss
    (the check stops there)."""
    if hits:
        access.hits.labels(way="plugin").inc(hits)
    if hits < asked:
        access.lookup("plugin", False)
