"""A directory that wants 2 copies on a cluster with 1 live worker (issue 29 item 9): its blocks
have one copy, which is under-replicated whatever the number of live workers. `report` counts
them and says why they cannot be repaired, `fsck` exits non-zero; a file under the default
durable policy (bounded by the live workers) stays healthy."""
from __future__ import annotations

import json

from curvine_py.core.domain import Policy, StorageClass
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli

MiB = 1 << 20


def test_one_live_worker_under_a_two_replica_directory(cluster1: Cluster) -> None:
    cluster1.wait_for_live_workers(1)
    client = cluster1.client()
    client.fs.mkdir("/plain", parents=True)
    with client.fs.open("/plain/ok.bin", "wb") as handle:
        handle.write(random_bytes(MiB, seed=1))
    master = ["--master", cluster1.master_address]
    assert cli("fsck", *master).returncode == 0, "the default durable count is bounded by the live workers"

    client.fs.mkdir("/two", parents=True)
    client.fs.set_policy("/two", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
    with client.fs.open("/two/w.bin", "wb") as handle:
        handle.write(random_bytes(3 * MiB, seed=2))
    [info] = client.master.get_blocks(client.fs.stat("/two/w.bin").ino).blocks[:1]
    assert len(info.worker_ids) == 1

    def report() -> dict:   # type: ignore[type-arg]
        result = cli("report", *master, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)   # type: ignore[no-any-return]
    assert int(report()["replication"]["underReplicated"]) == 3
    wait_until(lambda: "only 1 live worker" in report()["replication"]["lastError"], 30,
               "a repair round says why it cannot repair")
    text = cli("report", *master).stdout.decode()
    assert "3 under-replicated" in text and "cannot repair: only 1 live worker" in text

    found = cli("fsck", *master, "--json")
    assert found.returncode != 0
    assert int(json.loads(found.stdout)["replication"]["underReplicated"]) == 3
