"""Issue 11, partition, for files: a block read from a worker cut off behind an open connection
gives up within ClientConfig.block_deadline_s and reads the other replica, far below the bulk data
timeout. The worker runs in its own network namespace; its link is cut (packets vanish: no RST)."""
from __future__ import annotations

import time

from curvine_py.client import CurvineClient
from curvine_py.core.domain import Policy, StorageClass
from curvine_py.procs import RoleProcess
from tests.harness import Cluster, random_bytes
from tests.integration.test_client_partition import cut, lab_cluster, requires_netns
from tests.netns import NetnsLab

pytestmark = requires_netns()

__all__ = ["lab_cluster"]    # the fixture, shared with the KV partition test

DEADLINE_S = 1.0
DATA_TIMEOUT_S = 30.0
BOUND_S = 10.0   # generous for a loaded machine, and still a third of the data timeout
MiB = 1 << 20


def client(cluster: Cluster) -> CurvineClient:
    return cluster.client(block_deadline_s=DEADLINE_S, data_timeout_s=DATA_TIMEOUT_S)


def test_a_block_read_from_a_cut_worker_reads_the_other_replica_within_the_deadline(
        lab_cluster: tuple[NetnsLab, Cluster, list[RoleProcess]]) -> None:
    lab, cluster, workers = lab_cluster
    cluster.wait_for_live_workers(2)
    writer = client(cluster)
    writer.fs.mkdir("/durable")
    writer.fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
    data = random_bytes(3 * MiB + 5, seed=11)
    with writer.fs.open("/durable/f", "wb") as f:
        f.write(data)
    blocks = writer.master.get_blocks(writer.fs.stat("/durable/f").ino).blocks
    assert all(sorted(b.worker_ids) == sorted(w.field("id") for w in workers) for b in blocks)
    cut_id = blocks[0].worker_ids[0]             # the copy a reader tries first
    victim = next(i for i, w in enumerate(workers) if w.field("id") == cut_id)

    reader = client(cluster)
    with reader.fs.open("/durable/f") as f:     # open pooled connections, as a serving client has
        assert f.read() == data
    assert not reader.suspects.suspect(cut_id)

    cut(lab[victim])
    started = time.monotonic()
    with reader.fs.open("/durable/f") as f:
        assert f.read() == data, "every block comes from the replica on the other worker"
    elapsed = time.monotonic() - started
    assert elapsed < BOUND_S, f"{elapsed:.1f}s: the bulk data timeout ({DATA_TIMEOUT_S}s) was waited"
    assert reader.suspects.suspect(cut_id), "the cut worker was tried and given up on"
