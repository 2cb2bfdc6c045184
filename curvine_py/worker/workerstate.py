"""What every data-plane connection of a worker shares (`WorkerState`: its id, the epoch the
heartbeats raise, its metric families and per-connection tallies) and the options a session is
served with (`SessionOptions`). Moved out of worker/server.py, which re-exports both."""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from curvine_py.core import frames
from curvine_py.observe.local import HistogramChild
from curvine_py.observe.metrics import WorkerMetrics, register_worker
from curvine_py.observe.tally import Tallies
from curvine_py.worker.limits import ServerLimits


class WorkerState:
    """What every connection needs to know about the worker; `epoch` is raised by heartbeats.
    `metrics` are the worker's families (a private registry when none is given: a server built
    by a test counts without exposing anything)."""

    def __init__(self, worker_id: str, epoch: int = 0, metrics: WorkerMetrics | None = None) -> None:
        self.worker_id = worker_id
        self.epoch = epoch   # a plain int: assignment is atomic, readers need no lock
        self.metrics = metrics or register_worker(CollectorRegistry())
        # Label children of the per-request metrics, looked up once: `labels()` costs a few
        # microseconds a call (a lock, a sort, a dict), three calls per request. The KV ones exist
        # from the start (reading 0) instead of from the first request.
        access = self.metrics.access
        self.kv_hits = access.hits.labels(way="kv")
        self.kv_misses = access.misses.labels(way="kv")
        self.kv_sent = access.sent.labels(way="kv")
        self.kv_received = access.received.labels(way="kv")
        # Per connection, added to those children at each scrape (tally.py: no call per request).
        self.tallies = Tallies(self.kv_hits, self.kv_misses, self.kv_sent, self.kv_received)
        self.metrics.before_scrape.add(self.tallies.fold)

    def latency_part(self, op: frames.Op) -> HistogramChild:
        """A part of the request-duration histogram of `op` for one connection's thread (merged at
        each scrape, observe/merged.py); `retire_latency` when the connection ends."""
        return self.metrics.latency.part(op.name.lower())

    def retire_latency(self, part: HistogramChild) -> None:
        self.metrics.latency.retire(part)

    def lookups(self) -> tuple[int, int]:
        """(hits, misses) of KV lookups answered by this worker's data plane since it started."""
        registry = self.metrics.registry
        hits = registry.get_sample_value("curvine_cache_hits_total", {"way": "kv"})
        misses = registry.get_sample_value("curvine_cache_misses_total", {"way": "kv"})
        return int(hits or 0), int(misses or 0)


@dataclass(frozen=True, slots=True)
class SessionOptions:
    token: str
    max_payload: int
    pass_fds: bool = False   # short-circuit: GET/READ_BLOCK reply with the fd, not the bytes
    idle_timeout_s: float = 0.0     # 0 = never (see the module docstring)
    header_timeout_s: float = 0.0
    auth_timeout_s: float = 0.0
    profile_dir: str = ""           # cProfile each connection, stats here (worker/connwrap.py)

    @classmethod
    def bounded(cls, token: str, max_payload: int, limits: ServerLimits, *,
                pass_fds: bool = False) -> SessionOptions:
        return cls(token, max_payload, pass_fds, limits.idle_timeout_s, limits.header_timeout_s,
                   limits.auth_timeout_s, limits.profile_dir)
