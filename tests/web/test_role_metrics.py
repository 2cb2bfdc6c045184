"""`/metrics` of each role, scraped over HTTP from real processes (scrape, act, scrape): the master
counts its RPCs by method and status and reports the membership, the worker its data dirs' usage,
the mount its FUSE requests by op, lookups as hits and misses, and bytes written. Every exposition
passes prometheus-client's own parser. The master's status page is served on its own port."""
from __future__ import annotations

import os
import pathlib
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.core.errors import NotFound
from tests.fuse.mounts import Mount
from tests.harness import Cluster, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
MiB = 1 << 20


def scrape(endpoint: str) -> Samples:
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        # Ours, and prometheus-client's process collector (named as every exporter's).
        assert family.name.startswith(("curvine_", "process_")), family.name
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=1, token="t0ken", master_args=["--metrics-port", "-1", "--status-port", "-1"],
                 worker_args=["--metrics-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(1)
        yield cluster


def test_master_counts_rpcs_by_method_and_status(cluster: Cluster) -> None:
    assert cluster.master is not None
    endpoint = cluster.master.field("metrics")
    before = scrape(endpoint)
    client = cluster.client()
    client.fs.mkdir("/metrics-dir")
    with pytest.raises(NotFound):
        client.fs.stat("/no/such/path")
    after = scrape(endpoint)
    moved = {k: after[k] - before.get(k, 0.0) for k in after
             if k[0] == "curvine_master_rpcs_total" and after[k] != before.get(k, 0.0)}
    assert any(dict(labels) == {"method": "Create", "code": "OK"} for _, labels in moved), moved
    assert any(dict(labels)["code"] == "NOT_FOUND" for _, labels in moved), moved
    assert value(after, "curvine_workers", state="live") == 1
    assert value(after, "curvine_membership_epoch") >= 1
    assert value(after, "curvine_master_rpc_duration_seconds_count", method="Create") >= 1


def test_master_serves_its_status_page(cluster: Cluster) -> None:
    assert cluster.master is not None
    with urllib.request.urlopen(f"http://{cluster.master.field('status')}/", timeout=10) as reply:
        page = reply.read().decode()
    assert f'data-worker-id="{cluster.worker_id(0)}"' in page
    assert 'data-health="healthy"' in page


def test_worker_usage_moves_with_a_put(cluster: Cluster) -> None:
    worker = cluster.workers[0]
    assert worker is not None
    endpoint = worker.field("metrics")
    before = value(scrape(endpoint), "curvine_data_dir_used_bytes", dir="0")
    cluster.client().kv.put("metrics-object", os.urandom(MiB))
    after = value(scrape(endpoint), "curvine_data_dir_used_bytes", dir="0")
    assert after >= before + MiB
    assert value(scrape(endpoint), "curvine_data_dir_capacity_bytes", dir="0") > 0


def test_mount_counts_fuse_requests(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with Mount(cluster.master_address, tmp_path / "mnt", token=cluster.token,
               args=["--metrics-port", "-1"]) as mount:
        assert mount.process is not None
        endpoint = mount.process.field("metrics")
        before = scrape(endpoint)
        (mount.path / "chunk.bin").write_bytes(b"k" * (2 * MiB))
        assert not (mount.path / "missing.bin").exists()
        assert (mount.path / "chunk.bin").stat().st_size == 2 * MiB
        wait_until(lambda: value(scrape(endpoint), "curvine_received_bytes_total", way="mount")
                   >= value(before, "curvine_received_bytes_total", way="mount") + 2 * MiB, 10, "write bytes")
        after = scrape(endpoint)
        for op in ("create", "write", "lookup"):
            assert value(after, "curvine_mount_requests_total", op=op) > \
                value(before, "curvine_mount_requests_total", op=op), op
        assert value(after, "curvine_cache_misses_total", way="mount") > \
            value(before, "curvine_cache_misses_total", way="mount")
        assert value(after, "curvine_errors_total", code="ENOENT") == value(before, "curvine_errors_total",
                                                                               code="ENOENT")


def test_metrics_ports_are_off_by_default(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        assert cluster.master is not None and cluster.workers[0] is not None
        with pytest.raises(KeyError):
            cluster.master.field("metrics")
        with pytest.raises(KeyError):
            cluster.workers[0].field("metrics")
