"""The metric families (observe/metrics.py), the exporter (observe/exporter.py) and the gRPC
interceptor (observe/rpcmetrics.py): names pass prometheus-client's own exposition parser and
follow the conventions, counters move when the helpers are called, bad label values are refused."""
from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.core.errors import InvalidArgument, NotFound, Unavailable
from curvine_py.observe import metrics as m
from curvine_py.observe.exporter import serve_metrics, start_metrics_server
from curvine_py.observe.rpcmetrics import RpcMetricsInterceptor, method_label
from curvine_py.rpc.auth import TokenInterceptor, call_metadata

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_text(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape(registry: CollectorRegistry) -> Samples:
    return scrape_text(generate_latest(registry).decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def all_roles() -> list[CollectorRegistry]:
    registries = [CollectorRegistry() for _ in range(4)]
    m.register_worker(registries[0], lambda: [m.DataDirUsage(0, 100, 40)])
    m.register_master(registries[1], lambda: m.ClusterGauges(3, 2, 1, 200, 50))
    m.register_mount(registries[2])
    m.register_client(registries[3])
    return registries


def test_every_family_follows_the_naming_conventions() -> None:
    for registry in all_roles():
        families = list(text_string_to_metric_families(generate_latest(registry).decode()))
        assert families
        for family in families:
            if family.name.startswith("process_"):
                continue    # prometheus-client's own process collector, named as every exporter's
            assert family.name.startswith("curvine_"), family.name
            if family.type == "counter":
                assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
            if family.type == "histogram":
                assert family.name.endswith("_seconds"), family.name
            if "capacity" in family.name or "used" in family.name:
                assert family.name.endswith("_bytes"), family.name


def test_two_registries_of_one_role_do_not_clash() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    a, b = m.register_worker(first), m.register_worker(second)
    a.access.lookup("kv", hit=True)
    assert value(scrape(first), "curvine_cache_hits_total", way="kv") == 1
    assert value(scrape(second), "curvine_cache_hits_total", way="kv") == 0
    with pytest.raises(ValueError):     # the same role twice in one registry is a real clash
        m.register_worker(first)
    del b


def test_access_counters_move_with_the_helpers() -> None:
    registry = CollectorRegistry()
    worker = m.register_worker(registry)
    worker.access.lookup("kv", hit=True)
    worker.access.lookup("kv", hit=True)
    worker.access.lookup("lm", hit=False)
    worker.access.bytes_in("kv", 4096)
    worker.access.bytes_out("lm", 1 << 20)
    with worker.access.timed("get"):
        pass
    with pytest.raises(NotFound), worker.access.timed("get"):
        raise NotFound("no such object")
    with pytest.raises(RuntimeError), worker.access.timed("put"):
        raise RuntimeError("a bug")
    worker.evicted("ttl", 3)
    worker.evicted("space")
    worker.evicted("watermark", 0)
    s = scrape(registry)
    assert value(s, "curvine_cache_hits_total", way="kv") == 2
    assert value(s, "curvine_cache_misses_total", way="lm") == 1
    assert value(s, "curvine_cache_misses_total", way="kv") == 0
    assert value(s, "curvine_received_bytes_total", way="kv") == 4096
    assert value(s, "curvine_sent_bytes_total", way="lm") == 1 << 20
    assert value(s, "curvine_operation_duration_seconds_count", op="get") == 2
    assert value(s, "curvine_operation_duration_seconds_count", op="put") == 1
    assert value(s, "curvine_errors_total", code="ENOENT") == 1
    assert value(s, "curvine_errors_total", code="internal") == 1
    assert value(s, "curvine_evictions_total", reason="ttl") == 3
    assert value(s, "curvine_evictions_total", reason="space") == 1
    assert ("curvine_evictions_total", (("reason", "watermark"),)) not in s


def test_connections_gauge_counts_while_held() -> None:
    registry = CollectorRegistry()
    worker = m.register_worker(registry)
    with worker.connections.held("data"), worker.connections.held("data"):
        assert value(scrape(registry), "curvine_open_connections", listener="data") == 2
    with pytest.raises(OSError), worker.connections.held("lm"):
        raise OSError("peer reset")
    s = scrape(registry)
    assert value(s, "curvine_open_connections", listener="data") == 0
    assert value(s, "curvine_open_connections", listener="lm") == 0


def test_state_gauges_are_read_at_scrape_time() -> None:
    dirs = [m.DataDirUsage(0, 1000, 10), m.DataDirUsage(1, 2000, 0)]
    registry = CollectorRegistry()
    m.register_worker(registry, lambda: dirs)
    assert value(scrape(registry), "curvine_data_dir_used_bytes", dir="0") == 10
    dirs[0] = m.DataDirUsage(0, 1000, 600)
    s = scrape(registry)
    assert value(s, "curvine_data_dir_used_bytes", dir="0") == 600
    assert value(s, "curvine_data_dir_capacity_bytes", dir="1") == 2000

    master = CollectorRegistry()
    m.register_master(master, lambda: m.ClusterGauges(epoch=7, live_workers=2, lost_workers=1,
                                                      capacity=300, used=30))
    s = scrape(master)
    assert value(s, "curvine_membership_epoch") == 7
    assert value(s, "curvine_workers", state="live") == 2
    assert value(s, "curvine_workers", state="lost") == 1


def test_a_failing_state_source_drops_its_gauges_not_the_scrape() -> None:
    def broken() -> list[m.DataDirUsage]:
        raise OSError("store closed")

    registry = CollectorRegistry()
    worker = m.register_worker(registry, broken)
    worker.access.lookup("kv", hit=False)
    s = scrape(registry)
    assert value(s, "curvine_cache_misses_total", way="kv") == 1
    assert not any(name.startswith("curvine_data_dir") for name, _ in s)


def test_mount_requests_by_fuse_op() -> None:
    registry = CollectorRegistry()
    mount = m.register_mount(registry)
    for _ in range(3):
        with mount.request("lookup"):
            pass
    with pytest.raises(NotFound), mount.request("getattr"):
        raise NotFound("gone")
    mount.access.lookup("mount", hit=True)
    s = scrape(registry)
    assert value(s, "curvine_mount_requests_total", op="lookup") == 3
    assert value(s, "curvine_mount_requests_total", op="getattr") == 1
    assert value(s, "curvine_mount_request_duration_seconds_count", op="lookup") == 3
    assert value(s, "curvine_errors_total", code="ENOENT") == 1
    assert value(s, "curvine_cache_hits_total", way="mount") == 1


@pytest.mark.parametrize("bad", ["/models/llama/chunk-0001", "key with spaces", "", "x" * 49, "7up"])
def test_data_never_becomes_a_label(bad: str) -> None:
    """A key, a path or anything not a short identifier is a ValueError (a caller's bug), and
    nothing is recorded."""
    registry = CollectorRegistry()
    worker = m.register_worker(registry)
    with pytest.raises(ValueError), worker.access.timed(bad):
        pass
    s = scrape(registry)
    assert not any(name.startswith("curvine_operation_duration_seconds_count") for name, _ in s)


def test_unknown_vocabulary_is_refused() -> None:
    worker = m.register_worker(CollectorRegistry())
    with pytest.raises(ValueError, match="unknown way"):
        worker.access.lookup("s3", hit=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eviction reason"):
        worker.evicted("lru")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="listener"), worker.connections.held("grpc"):  # type: ignore[arg-type]
        pass


# -- the HTTP exporter -------------------------------------------------------------------------------

def test_exporter_serves_the_registry_over_http() -> None:
    registry = CollectorRegistry()
    worker = m.register_worker(registry)
    service = serve_metrics("127.0.0.1", -1, registry)
    assert service is not None
    try:
        url = f"http://127.0.0.1:{service.port}/metrics"

        def fetch() -> Samples:
            with urllib.request.urlopen(url, timeout=5) as reply:
                assert reply.status == 200
                assert reply.headers["Content-Type"].startswith("text/plain")
                return scrape_text(reply.read().decode())

        before = fetch()
        worker.access.lookup("kv", hit=True)
        after = fetch()
        assert value(after, "curvine_cache_hits_total", way="kv") == \
            value(before, "curvine_cache_hits_total", way="kv") + 1
    finally:
        service.close()


def test_port_zero_is_off_and_bad_ports_are_refused() -> None:
    registry = CollectorRegistry()
    assert serve_metrics("127.0.0.1", 0, registry) is None
    assert start_metrics_server("127.0.0.1", 0, registry) == 0
    for bad in (-2, 65536):
        with pytest.raises(InvalidArgument, match="0 \\(off\\)"):
            serve_metrics("127.0.0.1", bad, registry)


def test_a_port_in_use_is_unavailable() -> None:
    registry = CollectorRegistry()
    first = serve_metrics("127.0.0.1", -1, registry)
    assert first is not None
    try:
        with pytest.raises(Unavailable, match="cannot listen"):
            serve_metrics("127.0.0.1", first.port, registry)
    finally:
        first.close()


# -- the gRPC interceptor ------------------------------------------------------------------------------

def _echo_handlers() -> grpc.GenericRpcHandler:
    def ok(request: bytes, context: grpc.ServicerContext) -> bytes:
        return request

    def missing(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        raise AssertionError("unreachable")

    def crash(request: bytes, context: grpc.ServicerContext) -> bytes:
        raise RuntimeError("a bug")

    return grpc.method_handlers_generic_handler("test.v1.Echo", {
        name: grpc.unary_unary_rpc_method_handler(fn)
        for name, fn in (("Ok", ok), ("Missing", missing), ("Crash", crash))})


@pytest.fixture
def echo_server() -> Iterator[tuple[str, m.MasterMetrics]]:
    from concurrent.futures import ThreadPoolExecutor
    registry = CollectorRegistry()
    metrics = m.register_master(registry)
    server = grpc.server(ThreadPoolExecutor(max_workers=2),
                         interceptors=[RpcMetricsInterceptor(metrics), TokenInterceptor("s3cret")])
    server.add_generic_rpc_handlers((_echo_handlers(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", metrics
    finally:
        server.stop(0).wait()


def test_interceptor_counts_rpcs_by_method_and_status(echo_server: tuple[str, m.MasterMetrics]) -> None:
    address, metrics = echo_server
    auth = call_metadata("s3cret")
    with grpc.insecure_channel(address) as channel:
        def call(method: str, metadata: tuple[tuple[str, str], ...] = auth) -> grpc.StatusCode:
            stub: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/test.v1.Echo/{method}")
            try:
                stub(b"x", metadata=metadata, timeout=5)
            except grpc.RpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        assert call("Ok") == grpc.StatusCode.OK
        assert call("Ok") == grpc.StatusCode.OK
        assert call("Missing") == grpc.StatusCode.NOT_FOUND
        assert call("Crash") == grpc.StatusCode.UNKNOWN
        assert call("Ok", metadata=()) == grpc.StatusCode.UNAUTHENTICATED
        assert call("NoSuchMethod/../x") == grpc.StatusCode.UNIMPLEMENTED
    s = scrape(metrics.registry)
    assert value(s, "curvine_master_rpcs_total", method="Ok", code="OK") == 2
    assert value(s, "curvine_master_rpcs_total", method="Missing", code="NOT_FOUND") == 1
    assert value(s, "curvine_master_rpcs_total", method="Crash", code="UNKNOWN") == 1
    assert value(s, "curvine_master_rpcs_total", method="Ok", code="UNAUTHENTICATED") == 1
    assert value(s, "curvine_master_rpcs_total", method="unknown", code="UNIMPLEMENTED") == 1
    assert value(s, "curvine_master_rpc_duration_seconds_count", method="Ok") == 3
    # The peer's made-up method name never became a label value.
    assert not any("NoSuchMethod" in str(labels) for _, labels in s)


def test_method_label_takes_the_last_name_only() -> None:
    assert method_label("/curvine.v1.Master/Lookup") == "Lookup"
    assert method_label("/curvine.v1.Master/") == "unknown"
    assert method_label("/a/b c") == "unknown"
