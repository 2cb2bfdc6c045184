"""A real worker's `/metrics` (scrape, act, scrape), parsed with prometheus-client's own exposition
parser: KV lookups (way `kv`) and lm:// lookups (way `lm`) as hits and misses, payload bytes in and
out, operation durations per op, evictions by reason, open connections per listener, errors by
errno name; and the KV hits and misses the heartbeat carries into the master's report (the status
page's hit rate, `report --json`); the native LMCache plugin's lookups as way `plugin` in the
process it runs in (here: the test's). One worker, so every key is owned by it and each count is exact; the test client's node
differs from the worker's, so it reads over TCP (bytes sent) rather than by short-circuit."""
from __future__ import annotations

import json
import pathlib
import select
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.core import frames, lmproto
from curvine_py.lmcache.native import Completion, CurvineNativeConnector
from curvine_py.observe.statusview import status_view
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.proto.curvine.v1.master_pb2 import WorkerInfo
from curvine_py.transport.blocking import read_head, recv_exactly
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
KiB = 1 << 10
TOKEN = "t0ken"


def scrape(endpoint: str) -> Samples:
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for label in sample.labels.values():   # low cardinality: never a key as a label
                assert "metrics-key" not in label, sample
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=1, token=TOKEN, worker_args=["--metrics-port", "-1", "--lm-port", "-1"]) as c:
        c.wait_for_live_workers(1)
        yield c


def endpoints(cluster: Cluster) -> tuple[str, tuple[str, int]]:
    worker = cluster.workers[0]
    assert worker is not None
    host, port = worker.field("lm").rsplit(":", 1)
    return worker.field("metrics"), (host, int(port))


def test_kv_traffic_moves_the_worker_counters(cluster: Cluster) -> None:
    metrics, _ = endpoints(cluster)
    kv = cluster.client().kv
    before = scrape(metrics)
    for i in range(3):
        kv.put(f"metrics-key-{i}", random_bytes(64 * KiB, seed=i))
    assert kv.get("metrics-key-0") == random_bytes(64 * KiB, seed=0)
    assert kv.get("metrics-key-1") is not None
    assert kv.get("metrics-key-absent") is None
    assert kv.exists_prefix(["metrics-key-0", "metrics-key-1", "metrics-key-absent", "metrics-key-2"]) == 2
    # A request's duration is observed right after its reply has left: the scrape waits for the
    # last one's (on a loaded machine the worker's thread may not have run that line yet).
    scraped: list[Samples] = []

    def observed() -> bool:
        scraped[:] = [scrape(metrics)]
        return moved(before, scraped[0], "curvine_operation_duration_seconds_count", op="exists") >= 1

    wait_until(observed, 10.0, "the EXISTS request's duration in /metrics")
    after = scraped[0]

    assert moved(before, after, "curvine_cache_hits_total", way="kv") == 2 + 2      # two GETs, a prefix of 2
    assert moved(before, after, "curvine_cache_misses_total", way="kv") == 1 + 1    # a GET, the prefix's end
    assert moved(before, after, "curvine_received_bytes_total", way="kv") == 3 * 64 * KiB
    assert moved(before, after, "curvine_sent_bytes_total", way="kv") == 2 * 64 * KiB
    assert moved(before, after, "curvine_operation_duration_seconds_count", op="put") == 3
    assert moved(before, after, "curvine_operation_duration_seconds_count", op="get") == 3
    assert moved(before, after, "curvine_operation_duration_seconds_count", op="exists") == 1
    assert value(after, "curvine_open_connections", listener="data") >= 1   # the client's pooled one
    assert moved(before, after, "curvine_cache_hits_total", way="lm") == 0


def test_lm_traffic_counts_as_way_lm_and_its_connection_is_open_while_held(cluster: Cluster) -> None:
    metrics, lm = endpoints(cluster)
    before = scrape(metrics)
    data = random_bytes(32 * KiB, seed=7)
    with socket.create_connection(lm, timeout=10) as sock:
        sock.sendall(lmproto.encode_request(lmproto.Command.PUT, "metrics-key-lm", lmproto.ObjectMeta(len(data)))
                     + data)
        sock.sendall(lmproto.encode_request(lmproto.Command.GET, "metrics-key-lm"))
        reply = lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE))
        assert reply.ok and recv_exactly(sock, reply.meta.length) == data
        sock.sendall(lmproto.encode_request(lmproto.Command.GET, "metrics-key-lm-absent"))
        assert not lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE)).ok
        sock.sendall(lmproto.encode_request(lmproto.Command.EXIST, "metrics-key-lm"))
        assert lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE)).ok
        held = scrape(metrics)
    assert value(held, "curvine_open_connections", listener="lm") == 1
    wait_until(lambda: value(scrape(metrics), "curvine_open_connections", listener="lm") == 0, 10,
               "the lm:// connection counted closed")
    after = scrape(metrics)
    assert moved(before, after, "curvine_cache_hits_total", way="lm") == 2          # the GET hit, the EXIST
    assert moved(before, after, "curvine_cache_misses_total", way="lm") == 1
    assert moved(before, after, "curvine_received_bytes_total", way="lm") == len(data)
    assert moved(before, after, "curvine_sent_bytes_total", way="lm") == len(data)
    for op in ("lm_put", "lm_get"):
        assert moved(before, after, "curvine_operation_duration_seconds_count", op=op) >= 1, op
    assert moved(before, after, "curvine_operation_duration_seconds_count", op="lm_get") == 2
    # The lm:// server stores through the data plane of the owner (this worker): counted there as kv too.
    assert moved(before, after, "curvine_received_bytes_total", way="kv") == len(data)


def test_an_expired_entry_counts_as_a_ttl_eviction(cluster: Cluster) -> None:
    metrics, _ = endpoints(cluster)
    before = scrape(metrics)
    cluster.client().kv.put("metrics-key-ttl", b"x" * KiB, ttl_ms=100)
    wait_until(lambda: moved(before, scrape(metrics), "curvine_evictions_total", reason="ttl") == 1, 15,
               "a ttl eviction counted")
    after = scrape(metrics)
    assert moved(before, after, "curvine_evictions_total", reason="watermark") == 0
    assert moved(before, after, "curvine_evictions_total", reason="space") == 0


def test_an_unauthenticated_request_counts_as_an_eacces_error(cluster: Cluster) -> None:
    metrics, _ = endpoints(cluster)
    worker = cluster.workers[0]
    assert worker is not None
    host, port = worker.address.rsplit(":", 1)
    before = scrape(metrics)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frames.encode(frames.Op.GET, 1, DataHeader(key="metrics-key-x")))
        _, header = read_head(sock, max_payload=1 << 20, expect_response=True)
    assert header.errno != 0
    after = scrape(metrics)
    assert moved(before, after, "curvine_errors_total", code="EACCES") == 1
    assert moved(before, after, "curvine_cache_misses_total", way="kv") == 0   # refused, not looked up


def test_hits_and_misses_reach_the_master_report_and_report_json(cluster: Cluster) -> None:
    metrics, _ = endpoints(cluster)
    client = cluster.client()
    client.kv.put("metrics-key-report", b"r" * KiB)
    for _ in range(3):
        assert client.kv.get("metrics-key-report") is not None
    assert client.kv.get("metrics-key-report-absent") is None
    counted = scrape(metrics)
    hits = value(counted, "curvine_cache_hits_total", way="kv")
    misses = value(counted, "curvine_cache_misses_total", way="kv")
    assert hits >= 3 and misses >= 1

    def entry() -> WorkerInfo:
        [worker] = client.master.report().workers
        return worker

    wait_until(lambda: (entry().hits, entry().misses) == (hits, misses), 15, "a heartbeat with the counts")
    view = status_view(client.master.report(), now_ms=int(time.time() * 1000))
    assert view.hit_rate == pytest.approx(hits / (hits + misses))
    as_json = cli("report", "--master", cluster.master_address, "--token", TOKEN, "--json")
    assert as_json.returncode == 0, as_json.stderr.decode()
    [worker] = json.loads(as_json.stdout)["workers"]
    assert (int(worker["hits"]), int(worker["misses"])) == (hits, misses)


def finished(conn: CurvineNativeConnector, future_id: int) -> Completion:
    """Polls the connector's eventfd as LMCache's demux thread does, until `future_id` completes."""
    poller = select.poll()
    poller.register(conn.event_fd(), select.POLLIN)
    while True:
        assert poller.poll(10_000), f"no completion for {future_id}"
        for done in conn.drain_completions():
            if done[0] == future_id:
                return done


def test_the_native_plugin_counts_its_lookups_as_way_plugin_in_its_own_process(cluster: Cluster) -> None:
    def plugin_samples() -> Samples:
        samples: Samples = {}
        for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
            for sample in family.samples:
                if sample.labels.get("way") == "plugin":
                    samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    metrics, _ = endpoints(cluster)
    worker_before, before = scrape(metrics), plugin_samples()
    conn = CurvineNativeConnector(master=cluster.master_address, token=TOKEN, node="engine-node")
    try:
        keys = ["metrics-key-plugin-0", "metrics-key-plugin-1"]
        data = [memoryview(bytearray(random_bytes(4 * KiB, seed=i))) for i in range(2)]
        assert finished(conn, conn.submit_batch_set(keys, data))[3] == [True, True]
        out = [memoryview(bytearray(4 * KiB)) for _ in range(3)]
        got = finished(conn, conn.submit_batch_get([keys[0], "metrics-key-plugin-absent", keys[1]], out))
        assert got[3] == [True, False, True]
        found = finished(conn, conn.submit_batch_exists([*keys, "metrics-key-plugin-absent", keys[0]]))
        assert found[3] == [True, True, False, False]
    finally:
        conn.close()
    after = plugin_samples()
    assert moved(before, after, "curvine_cache_hits_total", way="plugin") == 2 + 2     # two gets, a prefix of 2
    assert moved(before, after, "curvine_cache_misses_total", way="plugin") == 1 + 1   # a get, the prefix's end
    assert moved(before, after, "curvine_received_bytes_total", way="plugin") == 2 * 4 * KiB
    assert moved(before, after, "curvine_sent_bytes_total", way="plugin") == 2 * 4 * KiB
    # The worker answered the same lookups on its data plane (way kv); way plugin is not its to count.
    worker_after = scrape(metrics)
    assert moved(worker_before, worker_after, "curvine_cache_hits_total", way="kv") == 4
    assert value(worker_after, "curvine_cache_hits_total", way="plugin") == 0
