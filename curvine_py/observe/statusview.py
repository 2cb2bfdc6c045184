"""The status page's view model: frozen values built from the master's `ClusterReport` (and the
policies of the top-level directories), core's domain values (core/cluster.py, core/domain.py)
where the page shows them as they are (quotas), a view where it derives something (health, names).

Health of a worker, in the order it is decided:
- `lost`: the master dropped it from the live set (its lease expired, or it left);
- `late`: still live, but its last heartbeat is older than `LATE_AFTER_MS` (the master's lease will
  decide soon; an operator should look now);
- `full`: live and at or above `FULL_RATIO` of its capacity (cache data will be evicted, durable
  writes get ENOSPC);
- `healthy` otherwise.

Hit counts: a worker that has served no lookup yet has no hit rate; the page says so rather than
showing a number it does not have. Quotas are the report's own list (every directory quota), and
so are the replication state (under-replicated and lost blocks, the repairs done) and the mounts
heard from within the session timeout.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from curvine_py.core.cluster import ClusterReport, MountInfo, Replication, WorkerInfo
from curvine_py.core.domain import PolicyAt, QuotaInfo, StorageClass

Health = Literal["healthy", "late", "full", "lost"]
LATE_AFTER_MS = 10_000
FULL_RATIO = 0.95


def hit_rate(hits: int | None, misses: int | None) -> float | None:
    if hits is None or misses is None or hits + misses == 0:
        return None
    return hits / (hits + misses)


@dataclass(frozen=True, slots=True)
class WorkerView:
    worker_id: str
    node: str
    address: str
    lm_port: int
    capacity: int
    used: int
    objects: int
    blocks: int
    evictions: int
    heartbeat_age_ms: int | None   # None: never heard from
    health: Health
    hits: int | None = None
    misses: int | None = None
    host: str = ""
    metrics_port: int = 0      # its /metrics port on `host`, 0 = off

    @property
    def used_ratio(self) -> float:
        return min(1.0, self.used / self.capacity) if self.capacity else 0.0

    @property
    def hit_rate(self) -> float | None:
        return hit_rate(self.hits, self.misses)


@dataclass(frozen=True, slots=True)
class PolicyView:
    path: str
    storage_class: str        # "cache" / "durable"
    replicas: int             # 0 = the class default
    ttl_ms: int               # 0 = none
    placement: str            # "hash" / "local"
    compress: bool


@dataclass(frozen=True, slots=True)
class MountView:
    node: str
    mountpoint: str
    metrics_port: int              # its /metrics port on `node`, 0 = off
    heartbeat_age_ms: int | None   # None: no heartbeat time reported


@dataclass(frozen=True, slots=True)
class StatusView:
    cluster_id: str
    epoch: int
    workers: tuple[WorkerView, ...]
    capacity: int
    used: int
    available: int
    files: int
    directories: int
    blocks: int
    dir_leases: int
    policies: tuple[PolicyView, ...] = ()
    quotas: tuple[QuotaInfo, ...] = ()
    master: str = ""
    error: str = ""            # set when the last report could not be read (the page says so)
    replication: Replication = Replication()
    mounts: tuple[MountView, ...] = ()
    metrics_port: int = 0      # the master's /metrics port, 0 = off

    @property
    def live_workers(self) -> int:
        return sum(1 for w in self.workers if w.health != "lost")

    @property
    def evictions(self) -> int:
        return sum(w.evictions for w in self.workers)

    @property
    def hits(self) -> int | None:
        counts = [w.hits for w in self.workers]
        return None if not counts or None in counts else sum(c or 0 for c in counts)

    @property
    def misses(self) -> int | None:
        counts = [w.misses for w in self.workers]
        return None if not counts or None in counts else sum(c or 0 for c in counts)

    @property
    def hit_rate(self) -> float | None:
        return hit_rate(self.hits, self.misses)


def worker_health(live: bool, heartbeat_age_ms: int | None, capacity: int, used: int) -> Health:
    if not live:
        return "lost"
    if heartbeat_age_ms is None or heartbeat_age_ms > LATE_AFTER_MS:
        return "late"
    if capacity and used >= FULL_RATIO * capacity:
        return "full"
    return "healthy"


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def worker_view(info: WorkerInfo, now_ms: int) -> WorkerView:
    age = max(0, now_ms - info.last_heartbeat_ms) if info.last_heartbeat_ms else None
    return WorkerView(
        worker_id=info.worker_id, node=info.node, address=_address(info.host, info.port),
        lm_port=info.lm_port, capacity=info.capacity, used=info.used, objects=info.objects,
        blocks=info.blocks, evictions=info.evictions, heartbeat_age_ms=age,
        health=worker_health(info.live, age, info.capacity, info.used),
        hits=info.hits, misses=info.misses, host=info.host, metrics_port=info.metrics_port)


def mount_view(info: MountInfo, now_ms: int) -> MountView:
    age = max(0, now_ms - info.last_heartbeat_ms) if info.last_heartbeat_ms else None
    return MountView(node=info.node, mountpoint=info.mountpoint, metrics_port=info.metrics_port,
                     heartbeat_age_ms=age)


_CLASS_NAMES = {StorageClass.CACHE: "cache", StorageClass.DURABLE: "durable"}


def policy_view(reply: PolicyAt) -> PolicyView:
    policy = reply.policy
    return PolicyView(
        path=reply.path or "/", storage_class=_CLASS_NAMES.get(policy.storage_class, "inherit"),
        replicas=policy.replicas, ttl_ms=policy.ttl_ms, placement=policy.placement or "hash",
        compress=policy.compress)


def quota_view(quota: QuotaInfo) -> QuotaInfo:
    """The root's quota is reported with an empty path: shown as "/"."""
    return quota if quota.path else replace(quota, path="/")


def status_view(report: ClusterReport, *, now_ms: int, policies: Sequence[PolicyAt] = (),
                master: str = "") -> StatusView:
    """The view of one report; workers sorted lost first (what an operator looks for), then by node."""
    workers = sorted((worker_view(w, now_ms) for w in report.workers),
                     key=lambda w: (w.health == "healthy", w.node, w.worker_id))
    return StatusView(
        cluster_id=report.cluster_id, epoch=report.epoch, workers=tuple(workers),
        capacity=report.capacity, used=report.used, available=report.available, files=report.files,
        directories=report.directories, blocks=report.blocks, dir_leases=report.dir_leases,
        policies=tuple(policy_view(p) for p in policies),
        quotas=tuple(sorted((quota_view(q) for q in report.quotas), key=lambda q: q.path)), master=master,
        replication=report.replication, metrics_port=report.metrics_port,
        mounts=tuple(sorted((mount_view(m, now_ms) for m in report.mounts), key=lambda m: (m.node, m.mountpoint))))


def unavailable_view(master: str, error: str) -> StatusView:
    """What the page shows when the master could not be asked (never a stale report as current)."""
    return StatusView(cluster_id="", epoch=0, workers=(), capacity=0, used=0, available=0, files=0,
                      directories=0, blocks=0, dir_leases=0, master=master, error=error)
