"""The Prometheus metric families of curvine-py, defined once, and the small helpers that move them.

Naming follows Prometheus conventions: a `curvine_` prefix, counters end in `_total`, units are
base units in the name (`_bytes`, `_seconds`). Labels are low-cardinality by construction: every
label value comes from a fixed vocabulary of this module (the way of access, the eviction reason,
the listener) or from code-defined names (an operation, an RPC method, a FUSE op, an errno name),
checked against `_NAME`; a key, a path or a peer address can never become a label value.

Each role builds its families into its own `CollectorRegistry` (`register_master`,
`register_worker`, `register_mount`, `register_client`), never into prometheus-client's global
default registry: tests run several roles in one process and a second registration of a name in
one registry is an error.

Every role's registry also carries the process collector (`process_resident_memory_bytes`,
`process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds`,
read from /proc at scrape time) and `curvine_build_info{version,python,role} 1`, so a dashboard
sees what runs where (`register_process`); a client library's registry does not (its host program
has its own process metrics, and two of them would clash).

Gauges that describe state another component already keeps (capacity and usage per data dir,
membership) are read at scrape time from a callable the role passes in (`StateCollector`), so
they are never stale and the role does no bookkeeping for them.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import platform
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from curvine_py.core.errors import CurvineError, errno_name
from curvine_py.observe.local import LocalCounter, LocalHistogram
from curvine_py.observe.merged import LockedChild, MergedHistogram
from curvine_py.observe.tally import Tallies

log = logging.getLogger(__name__)

# The ways a KV object is reached (issue 13): the native KV client, LMCache's lm:// server, the
# LMCache plugin (in the engine process) and the FUSE mount (fs:// on the mount).
Way = Literal["kv", "lm", "plugin", "mount"]
ACCESS_WAYS: tuple[str, ...] = get_args(Way)
# Why an entry left a worker: its TTL expired, the periodic pass found the dir above the high
# watermark, or a write needed room at once.
EvictionReason = Literal["ttl", "watermark", "space"]
EVICTION_REASONS: tuple[str, ...] = get_args(EvictionReason)
Listener = Literal["data", "lm", "shortcircuit"]
LISTENERS: tuple[str, ...] = get_args(Listener)

# Code-defined names only (ops, RPC methods, FUSE ops, errno names): short identifiers.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
# Data-plane and metadata operations: 100 us (a page-cache hit on loopback) to 10 s (a stuck disk).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)
INTERNAL_ERROR = "internal"   # the `code` of an exception that is not a CurvineError (a bug)


def label_name(value: str) -> str:
    """`value` if it is a code-defined identifier; ValueError otherwise (a caller passed data, such
    as a key or a path, where a name belongs)."""
    if not _NAME.match(value):
        raise ValueError(f"not a metric label name: {value!r}")
    return value


def _member(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")
    return value


def error_code(exc: BaseException) -> str:
    """The `code` label of an error: the errno name of a CurvineError, an OSError or a FUSE error
    ('ENOENT'); 'internal' for anything else (a bug)."""
    code = exc.errno if isinstance(exc, CurvineError) else getattr(exc, "errno", None)
    return errno_name(code) if isinstance(code, int) and code > 0 else INTERNAL_ERROR


@dataclass(frozen=True, slots=True)
class ErrorMetrics:
    """`curvine_errors_total{code}`: failed operations by errno name."""

    errors: Counter

    def record(self, exc: BaseException) -> None:
        self.errors.labels(code=error_code(exc)).inc()


@dataclass(frozen=True, slots=True)
class AccessMetrics:
    """Hits, misses and bytes by way of access, and latency per operation."""

    hits: Counter
    misses: Counter
    received: Counter
    sent: Counter
    latency: Histogram | MergedHistogram   # the worker's: merged (its data connections observe parts)
    errors: ErrorMetrics

    def lookup(self, way: Way, hit: bool) -> None:
        """A read or an existence check answered: a hit or a miss (a miss is a normal answer)."""
        (self.hits if hit else self.misses).labels(way=_member(way, ACCESS_WAYS, "way")).inc()

    def bytes_in(self, way: Way, nbytes: int) -> None:
        self.received.labels(way=_member(way, ACCESS_WAYS, "way")).inc(nbytes)

    def bytes_out(self, way: Way, nbytes: int) -> None:
        self.sent.labels(way=_member(way, ACCESS_WAYS, "way")).inc(nbytes)

    @contextlib.contextmanager
    def timed(self, op: str) -> Iterator[None]:
        """Observes the duration of the block under `op`; an exception leaving it is counted in
        `curvine_errors_total` by code and re-raised."""
        child = self.latency.labels(op=label_name(op))
        start = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            self.errors.record(exc)
            raise
        finally:
            child.observe(time.perf_counter() - start)


@dataclass(frozen=True, slots=True)
class ConnectionMetrics:
    """`curvine_open_connections{listener}`."""

    open: Gauge

    @contextlib.contextmanager
    def held(self, listener: Listener) -> Iterator[None]:
        """Counts one connection open for the duration of the block."""
        gauge = self.open.labels(listener=_member(listener, LISTENERS, "listener"))
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()


@dataclass(frozen=True, slots=True)
class DataDirUsage:
    """One data dir as the worker's store sees it; `index` is its position in --data-dir order
    (the label: a path is not a label value)."""

    index: int
    capacity: int
    used: int


@dataclass(frozen=True, slots=True)
class ClusterGauges:
    """Membership as the master sees it at scrape time."""

    epoch: int
    live_workers: int
    lost_workers: int
    capacity: int
    used: int


class StateCollector(Collector):
    """Gauges read from a callable at scrape time. A failing callable yields no samples for that
    scrape (logged), never a stale value and never a failed scrape of the other families."""

    def __init__(self, build: Callable[[], Iterable[GaugeMetricFamily]], what: str) -> None:
        self._build = build
        self._what = what

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            return list(self._build())
        except Exception:
            log.exception("cannot read %s for the metrics scrape", self._what)
            return []

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []   # families are built per scrape; nothing to check for clashes ahead


class ScrapeHooks(Collector):
    """Callables run at the start of every collection of its registry (registered before the
    families, so what a hook adds is in the same scrape): counts a hot path keeps per thread are
    added to the shared counters only when someone looks (observe/tally.py). A failing hook is
    logged and the scrape goes on."""

    def __init__(self) -> None:
        self._hooks: list[Callable[[], None]] = []

    def add(self, hook: Callable[[], None]) -> None:
        self._hooks.append(hook)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        for hook in list(self._hooks):
            try:
                hook()
            except Exception:
                log.exception("a metrics scrape hook failed")
        return []

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []


def data_dir_families(dirs: Sequence[DataDirUsage]) -> list[GaugeMetricFamily]:
    capacity = GaugeMetricFamily("curvine_data_dir_capacity_bytes", "Capacity of a worker data dir",
                                 labels=["dir"])
    used = GaugeMetricFamily("curvine_data_dir_used_bytes", "Bytes stored in a worker data dir",
                             labels=["dir"])
    for usage in dirs:
        capacity.add_metric([str(usage.index)], usage.capacity)
        used.add_metric([str(usage.index)], usage.used)
    return [capacity, used]


def cluster_families(gauges: ClusterGauges) -> list[GaugeMetricFamily]:
    epoch = GaugeMetricFamily("curvine_membership_epoch", "Epoch of the membership view")
    epoch.add_metric([], gauges.epoch)
    workers = GaugeMetricFamily("curvine_workers", "Registered workers by state", labels=["state"])
    workers.add_metric(["live"], gauges.live_workers)
    workers.add_metric(["lost"], gauges.lost_workers)
    capacity = GaugeMetricFamily("curvine_cluster_capacity_bytes", "Capacity of the live workers")
    capacity.add_metric([], gauges.capacity)
    used = GaugeMetricFamily("curvine_cluster_used_bytes", "Bytes stored on the live workers")
    used.add_metric([], gauges.used)
    return [epoch, workers, capacity, used]


# -- role registries -------------------------------------------------------------------------------

Role = Literal["master", "worker", "mount"]


def version() -> str:
    """The installed curvine-py's version ('unknown' when run from a tree that is not installed)."""
    try:
        return importlib.metadata.version("curvine-py")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def register_process(registry: CollectorRegistry, role: Role) -> None:
    """The process collector (RSS, CPU seconds, open and max fds, start time) and the build info
    of a role's process."""
    ProcessCollector(registry=registry)
    Info("curvine_build", "What this process runs: curvine-py version, Python version, role",
         registry=registry).info({"version": version(), "python": platform.python_version(), "role": role})


def _errors(registry: CollectorRegistry) -> ErrorMetrics:
    return ErrorMetrics(Counter("curvine_errors", "Failed operations by errno name", ["code"],
                                registry=registry))


def _access(registry: CollectorRegistry, errors: ErrorMetrics,
            latency: MergedHistogram | None = None) -> AccessMetrics:
    return AccessMetrics(
        hits=Counter("curvine_cache_hits", "Reads and existence checks that found the object",
                     ["way"], registry=registry),
        misses=Counter("curvine_cache_misses", "Reads and existence checks that found nothing",
                       ["way"], registry=registry),
        received=Counter("curvine_received_bytes", "Payload bytes received", ["way"], registry=registry),
        sent=Counter("curvine_sent_bytes", "Payload bytes sent", ["way"], registry=registry),
        latency=latency or Histogram("curvine_operation_duration_seconds", "Duration of an operation", ["op"],
                                     buckets=LATENCY_BUCKETS, registry=registry),
        errors=errors,
    )


@dataclass(frozen=True, slots=True)
class WorkerMetrics:
    registry: CollectorRegistry
    access: AccessMetrics
    evictions: Counter
    connections: ConnectionMetrics
    errors: ErrorMetrics
    before_scrape: ScrapeHooks
    latency: MergedHistogram   # = access.latency: each data connection observes parts of its own

    def evicted(self, reason: EvictionReason, count: int = 1) -> None:
        if count:
            self.evictions.labels(reason=_member(reason, EVICTION_REASONS, "eviction reason")).inc(count)


def register_worker(registry: CollectorRegistry,
                    data_dirs: Callable[[], Sequence[DataDirUsage]] | None = None) -> WorkerMetrics:
    """The worker's families; `data_dirs` (read at each scrape) feeds capacity and usage per dir."""
    hooks = ScrapeHooks()
    registry.register(hooks)   # first: collected before the families it feeds
    register_process(registry, "worker")
    errors = _errors(registry)
    if data_dirs is not None:
        registry.register(StateCollector(lambda: data_dir_families(data_dirs()), "the data dirs"))
    latency = MergedHistogram("curvine_operation_duration_seconds", "Duration of an operation", "op", registry,
                              LATENCY_BUCKETS)
    return WorkerMetrics(
        registry=registry,
        access=_access(registry, errors, latency),
        evictions=Counter("curvine_evictions", "Entries evicted by reason", ["reason"], registry=registry),
        connections=ConnectionMetrics(Gauge("curvine_open_connections", "Client connections open now",
                                            ["listener"], registry=registry)),
        errors=errors,
        before_scrape=hooks,
        latency=latency,
    )


@dataclass(frozen=True, slots=True)
class MasterMetrics:
    """The master's families. The children of an RPC's method and status are resolved once and kept
    (`labels()` with its checks was most of the ~25 Python calls the metrics cost an RPC), and the
    duration histogram is a merged one (observe/merged.py) whose locked children the server's
    threads share: one call and one lock per observation instead of five calls and two locks."""

    registry: CollectorRegistry
    rpcs: Counter
    rpc_latency: MergedHistogram
    _children: dict[tuple[str, str], tuple[Counter, LockedChild]] = field(default_factory=dict)

    def rpc(self, method: str, code: str, seconds: float) -> None:
        """One finished RPC: `code` is the gRPC status name ('OK', 'NOT_FOUND')."""
        children = self._children.get((method, code))
        if children is None:
            # Checked once per (method, code); a racing first call of a pair makes the same children.
            children = self._children[(method, code)] = (
                self.rpcs.labels(method=label_name(method), code=label_name(code)),
                self.rpc_latency.labels(method=label_name(method)))
        count, latency = children
        count.inc()
        latency.observe(seconds)


def register_master(registry: CollectorRegistry,
                    cluster: Callable[[], ClusterGauges] | None = None) -> MasterMetrics:
    """The master's families; `cluster` (read at each scrape) feeds the membership gauges."""
    register_process(registry, "master")
    if cluster is not None:
        registry.register(StateCollector(lambda: cluster_families(cluster()), "the membership"))
    return MasterMetrics(
        registry=registry,
        rpcs=Counter("curvine_master_rpcs", "Master RPCs by method and status", ["method", "code"],
                     registry=registry),
        rpc_latency=MergedHistogram("curvine_master_rpc_duration_seconds", "Duration of a master RPC",
                                    "method", registry, LATENCY_BUCKETS),
    )


@dataclass(frozen=True, slots=True)
class MountMetrics:
    """The mount's families. The per-request ones are local families (observe/local.py: one
    writer, the trio thread; a prometheus-client `inc` or `observe` per request was most of what
    the request metrics cost a `stat`), and its hits, misses and bytes of the shared families are
    counted in a tally of `tallies` (observe/tally.py: added to `access`'s counters at each scrape)."""

    registry: CollectorRegistry
    access: AccessMetrics
    requests: LocalCounter
    request_latency: LocalHistogram
    errors: ErrorMetrics
    tallies: Tallies

    @contextlib.contextmanager
    def request(self, op: str) -> Iterator[None]:
        """One FUSE request `op` (a pyfuse3 Operations method name): counted, timed, and its
        failure counted by code."""
        name = label_name(op)
        self.requests.labels(op=name).inc()
        start = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            self.errors.record(exc)
            raise
        finally:
            self.request_latency.labels(op=name).observe(time.perf_counter() - start)


def register_mount(registry: CollectorRegistry) -> MountMetrics:
    hooks = ScrapeHooks()
    registry.register(hooks)   # first: collected before the families it feeds
    register_process(registry, "mount")
    errors = _errors(registry)
    access = _access(registry, errors)
    way: Way = "mount"
    tallies = Tallies(access.hits.labels(way=way), access.misses.labels(way=way),
                      access.sent.labels(way=way), access.received.labels(way=way))
    hooks.add(tallies.fold)
    return MountMetrics(
        registry=registry,
        access=access,
        requests=LocalCounter("curvine_mount_requests", "FUSE requests by op", "op", registry),
        request_latency=LocalHistogram("curvine_mount_request_duration_seconds", "Duration of a FUSE request",
                                       "op", registry, LATENCY_BUCKETS),
        errors=errors,
        tallies=tallies,
    )


@dataclass(frozen=True, slots=True)
class ClientMetrics:
    """A client library in another program (the LMCache plugin, `curvine-py kv`)."""

    registry: CollectorRegistry
    access: AccessMetrics
    errors: ErrorMetrics


def register_client(registry: CollectorRegistry) -> ClientMetrics:
    errors = _errors(registry)
    return ClientMetrics(registry=registry, access=_access(registry, errors), errors=errors)
