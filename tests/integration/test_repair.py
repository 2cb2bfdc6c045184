"""Re-replication against real processes (issue 11): 3 workers, a durable directory with 2
replicas; a worker killed with SIGKILL leaves under-replicated blocks that the master copies back
(the replica count is restored within 60 s), fsck then exits 0, and a second worker loss still
reads every file. A worker that comes back finds its copies surplus: they are given up, never
served stale. fsck reports what it finds and exits 1 when not clean."""
from __future__ import annotations

import json
import pathlib
import time

from curvine_py.client import CurvineClient
from curvine_py.core import layout
from curvine_py.core.domain import Policy, StorageClass
from tests.harness import Cluster, random_bytes
from tests.integration.test_cli import cli

MiB = 1 << 20
RESTORE_DEADLINE_S = 60.0


def write_files(client: CurvineClient, count: int) -> dict[str, bytes]:
    client.fs.mkdir("/durable")
    client.fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
    files = {f"/durable/f{i}": random_bytes(2 * MiB + 1000 * i, seed=i) for i in range(count)}
    for path, data in files.items():
        with client.fs.open(path, "wb") as f:
            f.write(data)
    return files


def replication(client: CurvineClient) -> tuple[int, int, int, int, int]:
    """(live workers, under-replicated, lost, surplus, repaired blocks) from the report."""
    report = client.master.report()
    r = report.replication
    return sum(w.live for w in report.workers), r.under_replicated, r.lost, r.surplus, r.repaired_blocks


def wait_for(client: CurvineClient, want: tuple[int, int, int, int], what: str) -> tuple[int, ...]:
    deadline = time.monotonic() + RESTORE_DEADLINE_S
    while True:
        state = replication(client)
        if state[:4] == want:
            return state
        assert time.monotonic() < deadline, f"{what}: still {state} after {RESTORE_DEADLINE_S}s"
        time.sleep(0.2)


def copies(client: CurvineClient, path: str) -> list[int]:
    """Live copies per block (GetBlocks also lists, last, the copies on registered workers past
    their lease)."""
    live = {w.worker_id for w in client.master.membership().workers if w.live}
    ino = client.fs.stat(path).ino
    return [sum(w in live for w in b.worker_ids) for b in client.master.get_blocks(ino).blocks]


def test_a_lost_worker_is_re_replicated_and_a_second_loss_reads_everything(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=3) as cluster:
        client = cluster.client()
        files = write_files(client, 8)
        assert replication(client)[:4] == (3, 0, 0, 0)
        assert all(set(copies(client, p)) == {2} for p in files)

        cluster.kill_worker(0)
        _, _, _, _, repaired = wait_for(client, (2, 0, 0, 0), "replica count restored")
        assert repaired > 0, "blocks that had a copy on the lost worker were copied again"
        assert all(set(copies(client, p)) == {2} for p in files), "2 live copies each"

        fsck = cli("fsck", "--master", cluster.master_address)
        assert fsck.returncode == 0, fsck.stdout.decode() + fsck.stderr.decode()
        assert b"0 under-replicated, 0 lost" in fsck.stdout

        cluster.kill_worker(1)
        reader = CurvineClient(cluster.master_address, node="reader", membership_refresh_s=0.5)
        try:
            for path, data in files.items():
                with reader.fs.open(path) as f:
                    assert f.read() == data, path
        finally:
            reader.close()


def test_a_returning_worker_gives_up_its_surplus_copies(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=3) as cluster:
        client = cluster.client()
        files = write_files(client, 4)
        held_before = cluster.workers[0]
        assert held_before is not None
        cluster.kill_worker(0)
        wait_for(client, (2, 0, 0, 0), "replica count restored")
        cluster.restart_worker(0)            # comes back with copies that were made again elsewhere
        wait_for(client, (3, 0, 0, 0), "surplus given up")
        assert all(set(copies(client, p)) == {2} for p in files)
        fsck = cli("fsck", "--master", cluster.master_address, "--json")
        assert fsck.returncode == 0, fsck.stdout.decode() + fsck.stderr.decode()
        found = json.loads(fsck.stdout)
        assert found["clean"] is True and found["replication"]["surplus"] == "0"
        assert sorted(i["workerId"] for i in found["inventories"]) == sorted(
            cluster.worker_id(i) for i in range(3)), "every live worker sent its inventory"
        for path, data in files.items():
            with client.fs.open(path) as f:
                assert f.read() == data


def test_fsck_reports_lost_files_and_what_repair_cannot_fix(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=2, master_args=["--repair-rate", "0"]) as cluster:
        client = cluster.client()
        client.fs.mkdir("/single")
        client.fs.set_policy("/single", Policy(storage_class=StorageClass.DURABLE, replicas=1, block_size=MiB))
        with client.fs.open("/single/only", "wb") as f:
            f.write(random_bytes(3 * MiB, seed=9))
        holders = {w for b in client.master.get_blocks(client.fs.stat("/single/only").ino).blocks
                   for w in b.worker_ids}
        victim = next(i for i in range(2) if cluster.worker_id(i) in holders)
        cluster.kill_worker(victim)
        deadline = time.monotonic() + RESTORE_DEADLINE_S
        while replication(client)[2] == 0:
            assert time.monotonic() < deadline, "the lost blocks never showed in the report"
            time.sleep(0.2)
        report = cli("report", "--master", cluster.master_address)
        assert b"LOST (no live copy of a block): /single/only" in report.stdout
        fsck = cli("fsck", "--master", cluster.master_address)
        assert fsck.returncode == 1
        assert b"LOST: /single/only" in fsck.stdout
        repair = cli("fsck", "--master", cluster.master_address, "--repair")
        assert repair.returncode == 1 and b"re-replication is off" in repair.stderr
        scrub = cli("fsck", "--master", cluster.master_address, "--scrub")   # works with repair off
        assert scrub.returncode == 1 and b"LOST: /single/only" in scrub.stdout
        assert b"0 corrupt (dropped)" in scrub.stdout and b"on workers not live" in scrub.stdout


def test_a_copy_dropped_as_corrupt_is_repaired_from_the_other_replica(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=3) as cluster:
        client = cluster.client()
        files = write_files(client, 1)
        (path, data), = files.items()
        first = client.master.get_blocks(client.fs.stat(path).ino).blocks[0]
        bad_worker = first.worker_ids[0]                 # the copy a reader tries first
        index = next(i for i in range(3) if cluster.worker_id(i) == bad_worker)
        name = layout.block_file_name(first.block_id)
        stored = cluster.worker_dir(index) / "blocks" / layout.shard_dir(name) / name
        raw = bytearray(stored.read_bytes())
        raw[len(raw) - first.length + 12345] ^= 0xFF     # one bit of the payload (after the header)
        stored.write_bytes(bytes(raw))

        with client.fs.open(path) as f:                  # the bad copy is detected, reported, skipped
            assert f.read() == data
        deadline = time.monotonic() + RESTORE_DEADLINE_S
        while True:
            _live, under, lost, surplus, repaired = replication(client)
            holders = client.master.get_blocks(client.fs.stat(path).ino).blocks[0].worker_ids
            if repaired >= 1 and (under, lost, surplus) == (0, 0, 0) and len(holders) == 2:
                break
            assert time.monotonic() < deadline, f"not repaired: {replication(client)} holders {list(holders)}"
            time.sleep(0.2)
        fsck = cli("fsck", "--master", cluster.master_address)
        assert fsck.returncode == 0, fsck.stdout.decode() + fsck.stderr.decode()
        fresh = CurvineClient(cluster.master_address, node="fresh")
        try:
            with fresh.fs.open(path) as f:
                assert f.read() == data
        finally:
            fresh.close()
