"""Issue 11, partition: a KV get from a worker whose network link is cut gives up within the
client's KV deadline (connect included), far below the bulk data timeout, then reads a replica or
misses. Workers run in their own network namespaces; the link is cut with `ip link set DEV down`
inside the namespace, so packets to and from the worker vanish (no RST, no ICMP)."""
from __future__ import annotations

import pathlib
import subprocess
import time
from collections.abc import Iterator

import pytest

from curvine_py.client import CurvineClient
from curvine_py.procs import RoleProcess, curvine_command, start
from tests.harness import Cluster, random_bytes
from tests.netns import IP, Namespace, NetnsLab, network_namespaces, requires_netns

pytestmark = requires_netns()

TOKEN = "partition-test-token"
DEADLINE_S = 1.0
DATA_TIMEOUT_S = 30.0
BOUND_S = 10.0   # generous for a loaded machine, and still a third of the data timeout


@pytest.fixture
def lab_cluster(tmp_path: pathlib.Path) -> Iterator[tuple[NetnsLab, Cluster, list[RoleProcess]]]:
    with network_namespaces(2) as lab:
        # A long worker lease: the master keeps the cut worker in the view, as it does for the
        # seconds before it notices a real partition; clients still try it.
        cluster = Cluster(tmp_path / "cluster", workers=0, token=TOKEN, host=lab.root_address,
                          master_args=["--lease-ms", "120000"])
        with cluster:
            workers = [start_worker_in(ns, cluster, i) for i, ns in enumerate(lab)]
            try:
                yield lab, cluster, workers
            finally:
                for worker in workers:
                    worker.kill()


def start_worker_in(ns: Namespace, cluster: Cluster, index: int) -> RoleProcess:
    data_dir = cluster.root / f"ns-worker{index}"
    data_dir.mkdir(parents=True)
    return start(f"ns-worker{index}", [*ns.prefix, *curvine_command(
        "worker", "--master", cluster.master_address, "--data-dir", str(data_dir), "--port", "0",
        "--node", f"host{index}", "--host", ns.address, "--token", TOKEN)], ready_prefix="worker=")


def cut(ns: Namespace) -> None:
    subprocess.run([IP, "-n", ns.name, "link", "set", ns.veth_ns, "down"], check=True, timeout=30)


def client(cluster: Cluster, replicas: int) -> CurvineClient:
    return cluster.client(kv_replicas=replicas, kv_deadline_s=DEADLINE_S, data_timeout_s=DATA_TIMEOUT_S)


def first_owned_by(c: CurvineClient, worker_id: str, prefix: str, count: int) -> list[str]:
    keys = []
    for i in range(1000):
        key = f"{prefix}-{i}"
        if c.kv.owners(key)[0].worker_id == worker_id:
            keys.append(key)
            if len(keys) == count:
                return keys
    raise AssertionError(f"no keys owned by {worker_id}")


def timed_get(c: CurvineClient, key: str) -> tuple[bytes | None, float]:
    started = time.monotonic()
    data = c.kv.get(key)
    return data, time.monotonic() - started


def test_get_from_a_cut_worker_reads_the_replica_or_misses_within_the_deadline(
        lab_cluster: tuple[NetnsLab, Cluster, list[RoleProcess]]) -> None:
    lab, cluster, workers = lab_cluster
    cluster.wait_for_live_workers(2)
    cut_id = workers[0].field("id")
    replicated, single = client(cluster, 2), client(cluster, 1)
    two = first_owned_by(replicated, cut_id, "two", 3)
    one = first_owned_by(single, cut_id, "one", 2)
    values = {key: random_bytes(256 * 1024 + n, seed=n) for n, key in enumerate(two + one)}
    for key in two:
        replicated.kv.put(key, values[key])
    for key in one:
        single.kv.put(key, values[key])
    for key in two + one:    # open pooled connections to both workers, as a serving client has
        assert (replicated if key in two else single).kv.get(key) == values[key]

    cut(lab[0])
    # An open connection to the cut worker: the reply never comes.
    for key in two:
        data, elapsed = timed_get(replicated, key)
        assert data == values[key], "the replica on the other worker answers"
        assert elapsed < BOUND_S
    assert replicated.suspects.suspect(cut_id), "the cut worker was tried and given up on"
    for key in one:
        data, elapsed = timed_get(single, key)
        assert data is None, "the only owner is cut off: a miss, not an error"
        assert elapsed < BOUND_S
    # A client with no connection yet: the connect itself is bounded by the deadline.
    fresh = client(cluster, 2)
    data, elapsed = timed_get(fresh, two[0])
    assert data == values[two[0]] and elapsed < BOUND_S
    assert fresh.suspects.suspect(cut_id)
    started = time.monotonic()
    assert not client(cluster, 1).kv.exists(one[0])
    assert time.monotonic() - started < BOUND_S
