"""fsck against real processes (issue 11): `--scrub` finds a flipped bit in one copy of a 2-replica
durable block without anyone reading it (exit 1, the copy named), `--scrub --repair` copies it back
from the other replica, and a final fsck is clean. The inventory pass leaves orphan blocks on the
workers unless told --repair."""
from __future__ import annotations

import json
import pathlib

from curvine_py.client import CurvineClient
from curvine_py.core import layout
from curvine_py.core.frames import Op
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from tests.harness import Cluster, random_bytes
from tests.integration.test_cli import cli
from tests.integration.test_repair import write_files
from tests.integration.test_worker_process import address_of
from tests.unit.test_worker_server import WireClient


def block_path(cluster: Cluster, index: int, block_id: int) -> pathlib.Path:
    name = layout.block_file_name(block_id)
    return cluster.worker_dir(index) / "blocks" / layout.shard_dir(name) / name


def test_scrub_finds_a_flipped_bit_and_repair_restores_the_copy(tmp_path: pathlib.Path) -> None:
    # 2 workers, 2 replicas: the only place the copy can come back to is the worker that lost it.
    with Cluster(tmp_path, workers=2) as cluster:
        client = cluster.client()
        (path, data), = write_files(client, 1).items()
        first = client.master.get_blocks(client.fs.stat(path).ino).blocks[0]
        bad_worker = first.worker_ids[0]
        index = next(i for i in range(2) if cluster.worker_id(i) == bad_worker)
        stored = block_path(cluster, index, first.block_id)
        raw = bytearray(stored.read_bytes())
        raw[len(raw) - first.length + 54321] ^= 0x01     # one bit of the payload, nobody reads it
        stored.write_bytes(bytes(raw))

        assert cli("fsck", "--master", cluster.master_address).returncode == 0, "without --scrub: not seen"
        found = cli("fsck", "--master", cluster.master_address, "--scrub")
        out = found.stdout.decode()
        assert found.returncode == 1, out + found.stderr.decode()
        assert f"CORRUPT: block {first.block_id:x} on worker {bad_worker} ({path})" in out, out
        assert "1 corrupt (dropped)" in out
        # dropped by the worker (the master's background repair may already have copied it back)
        assert not stored.exists() or stored.read_bytes() != bytes(raw), "the corrupt copy is gone"

        repaired = cli("fsck", "--master", cluster.master_address, "--scrub", "--repair", "--json")
        assert repaired.returncode == 0, repaired.stdout.decode() + repaired.stderr.decode()
        report = json.loads(repaired.stdout)
        assert report["clean"] is True and report["scrub"]["corrupt"] == []
        holders = client.master.get_blocks(client.fs.stat(path).ino).blocks[0].worker_ids
        assert sorted(holders) == sorted(cluster.worker_id(i) for i in range(2)), "both copies again"
        assert stored.exists() and stored.read_bytes() != bytes(raw), "a good copy came back from the other replica"

        final = cli("fsck", "--master", cluster.master_address, "--scrub")
        assert final.returncode == 0, final.stdout.decode() + final.stderr.decode()
        fresh = CurvineClient(cluster.master_address, node="fresh")
        try:
            with fresh.fs.open(path) as f:
                assert f.read() == data
        finally:
            fresh.close()


def test_fsck_leaves_orphan_blocks_unless_told_to_repair(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        orphan_id = 0x7E57_0001_0000
        payload = random_bytes(4096, seed=5)
        with WireClient(address_of(cluster)) as c:     # a block nothing in the metadata references
            c.call(Op.WRITE_BLOCK, DataHeader(block_id=orphan_id, length=len(payload),
                                              checksum=layout.object_checksum(payload)), payload)
        stored = block_path(cluster, 0, orphan_id)
        assert stored.exists()

        first = cli("fsck", "--master", cluster.master_address)
        assert first.returncode == 1, first.stdout.decode() + first.stderr.decode()
        assert b"1 orphan blocks (left on the worker; --repair deletes them)" in first.stdout
        assert stored.exists(), "fsck without --repair deleted nothing"

        fixed = cli("fsck", "--master", cluster.master_address, "--repair")
        assert fixed.returncode == 0, fixed.stdout.decode() + fixed.stderr.decode()
        assert b"1 orphan blocks (deleted on the worker)" in fixed.stdout
        assert cli("fsck", "--master", cluster.master_address).returncode == 0
        assert not stored.exists()


def object_path(cluster: Cluster, key: str) -> tuple[int, pathlib.Path]:
    """The worker index and the stored file of the KV object `key` (its only copy)."""
    name = layout.object_file_name(key)
    found = [(i, cluster.worker_dir(i) / "kv" / layout.shard_dir(name) / name) for i in range(3)]
    held = [(i, p) for i, p in found if p.exists()]
    assert len(held) == 1, held
    return held[0]


def test_scrub_names_and_drops_corrupt_kv_objects(tmp_path: pathlib.Path) -> None:
    # KV objects are not in the master's records: only the workers can find their bit flips.
    size = 4 * 1024 * 1024
    with Cluster(tmp_path, workers=3) as cluster:
        client = cluster.client()
        objects = {f"model/layer-{n}/chunk": random_bytes(size, seed=100 + n) for n in range(10)}
        for key, data in objects.items():
            client.kv.put(key, data)
        bad = sorted(objects)[2:8]
        holders = {}
        for key in bad:
            index, stored = object_path(cluster, key)
            holders[key] = cluster.worker_id(index)
            raw = bytearray(stored.read_bytes())
            raw[len(raw) - size + size // 2] ^= 0x10      # one bit in the middle of the payload
            stored.write_bytes(bytes(raw))
        assert len(set(holders.values())) > 1, "the corrupt objects are spread over several workers"

        found = cli("fsck", "--master", cluster.master_address, "--scrub", "--scrub-rate", "0")
        out = found.stdout.decode()
        assert found.returncode == 1, out + found.stderr.decode()
        for key in bad:
            assert f"CORRUPT: KV object {key!r} on worker {holders[key]}" in out, out
        assert "10 KV objects verified" in out and "6 corrupt (dropped" in out, out

        fresh = cluster.client()
        for key, data in objects.items():
            got = fresh.kv.get(key)
            assert got is None if key in bad else got == data, key   # a miss, never wrong bytes

        again = cli("fsck", "--master", cluster.master_address, "--scrub", "--json")
        assert again.returncode == 0, again.stdout.decode() + again.stderr.decode()
        report = json.loads(again.stdout)
        assert report["clean"] is True and report["scrub"]["kvObjects"] == 4
        assert report["scrub"]["kvCorrupt"] == []
