"""Issue #2 end to end: real master and worker processes on loopback, driven by the client library."""
from __future__ import annotations

import hashlib
import os
import pathlib
import time

import pytest

from curvine_py.core.domain import Policy, StorageClass
from curvine_py.core.errors import InvalidArgument, NameTooLong, NotFound
from tests.harness import Cluster, random_bytes, wait_until

MiB = 1 << 20


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def test_one_gib_file_round_trip_is_bit_exact(cluster3: Cluster, tmp_path: pathlib.Path) -> None:
    source, copy = tmp_path / "big.in", tmp_path / "big.out"
    with open(source, "wb") as fh:
        fh.writelines(os.urandom(64 * MiB) for _ in range(16))
    client = cluster3.client()
    client.fs.mkdir("/data")
    status = client.fs.put(str(source), "/data/big.bin")
    assert status.size == 1 << 30
    blocks = client.master.get_blocks(status.ino).blocks
    assert len(blocks) >= 16, "a 1 GiB file spans many blocks"
    assert all(len(b.worker_ids) == 2 for b in blocks), "durable files get min(2, workers) replicas"
    assert client.fs.get("/data/big.bin", str(copy)) == 1 << 30
    assert sha256_of(copy) == sha256_of(source)


@pytest.mark.parametrize("size", [1024, 64 * 1024, MiB + 7, 14 * MiB, 64 * MiB])
def test_kv_objects_of_every_size(cluster3: Cluster, size: int) -> None:
    kv = cluster3.client().kv
    data = random_bytes(size, seed=size)
    key = f"vllm@qwen2-7b@1@0@{size:x}@bfloat16"
    assert kv.get(key) is None and not kv.exists(key)
    kv.put(key, data, user_meta=b"fmt=kv;shape=28,2,256,4,128")
    assert kv.exists(key)
    assert kv.get(key) == data
    out = memoryview(bytearray(size + 100))
    assert kv.get_into(key, out) == size and out[:size] == data
    view, meta = kv.get_with_meta(key) or (None, None)
    assert view == data and meta == b"fmt=kv;shape=28,2,256,4,128"
    kv.put(key, data)   # a re-put is an idempotent success
    assert kv.delete(key) and kv.get(key) is None and not kv.delete(key)


def test_exists_prefix_counts_the_hit_prefix(cluster3: Cluster) -> None:
    kv = cluster3.client().kv
    keys = [f"prefix-chunk-{i}" for i in range(12)]
    for key in keys[:7]:
        kv.put(key, key.encode())
    kv.put(keys[9], b"after a gap")
    assert kv.exists_prefix(keys) == 7
    assert kv.exists_prefix(keys[7:]) == 0
    assert kv.exists_prefix([]) == 0


def test_killed_worker_gives_misses_never_wrong_bytes(cluster3: Cluster) -> None:
    client = cluster3.client()
    kv = client.kv
    values = {f"key-{i}": random_bytes(4096, seed=i) for i in range(60)}
    for key, value in values.items():
        kv.put(key, value)
    victim = cluster3.worker_id(1)
    lost = [k for k in values if kv.owners(k)[0].worker_id == victim]
    assert lost, "some keys live on the victim"
    cluster3.kill_worker(1)
    started = time.monotonic()
    for key in lost:
        assert kv.get(key) is None   # a miss, not an error and not another key's bytes
    assert time.monotonic() - started < 2.0
    for key in set(values) - set(lost):
        assert kv.get(key) == values[key]


def test_replicated_kv_survives_a_dead_owner(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=3) as cluster:
        kv = cluster.client(kv_replicas=2).kv
        values = {f"rep-{i}": random_bytes(2048, seed=i) for i in range(30)}
        for key, value in values.items():
            kv.put(key, value)
        cluster.kill_worker(0)
        started = time.monotonic()
        assert all(kv.get(k) == v for k, v in values.items())
        assert time.monotonic() - started < 2.0


def test_master_kill9_keeps_every_acknowledged_create(cluster1: Cluster) -> None:
    client = cluster1.client()
    client.fs.mkdir("/acked")
    created = []
    for i in range(200):
        with client.fs.open(f"/acked/f{i}", "wb") as handle:
            handle.write(f"payload {i}".encode())
        created.append(i)
    cluster1.kill_master()
    cluster1.start_master()
    client = cluster1.client()
    wait_until(lambda: client.master.statfs() is not None, 10, "master back")
    names = {s.path for s in client.fs.ls("/acked")}
    assert names == {f"/acked/f{i}" for i in created}
    with client.fs.open("/acked/f123") as handle:
        assert handle.read() == b"payload 123"


def test_restarted_worker_keeps_serving_its_blocks(cluster1: Cluster) -> None:
    client = cluster1.client()
    data = random_bytes(5 * MiB + 3, seed=5)
    with client.fs.open("/kept.bin", "wb") as handle:
        handle.write(data)
    client.kv.put("kept-key", b"kv survives too")
    cluster1.restart_worker(0)
    cluster1.wait_for_live_workers(1)
    with client.fs.open("/kept.bin") as handle:
        assert handle.read() == data
    assert client.kv.get("kept-key") == b"kv survives too"


def test_close_to_open_between_two_clients(cluster3: Cluster) -> None:
    writer, reader = cluster3.client(), cluster3.client()
    with writer.fs.open("/shared.txt", "wb") as handle:
        handle.write(b"version 1")
    handle = writer.fs.open("/shared.txt", "r+b")
    handle.pwrite(0, b"VERSION 2")
    with reader.fs.open("/shared.txt") as early:
        assert early.read() == b"version 1", "unflushed writes are not visible"
    handle.close()
    with reader.fs.open("/shared.txt") as late:
        assert late.read() == b"VERSION 2", "visible at the next open after close"


def test_sparse_truncate_and_holes(cluster1: Cluster) -> None:
    fs = cluster1.client().fs
    with fs.open("/sparse", "wb") as handle:
        handle.seek(100 * MiB)
        handle.write(b"tail")
        handle.truncate(1 << 50)   # 1 PiB: costs nothing
    status = fs.stat("/sparse")
    assert status.size == 1 << 50
    with fs.open("/sparse") as handle:
        assert handle.pread(100 * MiB - 2, 8) == b"\0\0tail\0\0"
        assert handle.pread(5 * MiB, 4) == b"\0" * 4


def test_bad_keys_and_paths_are_refused(cluster1: Cluster) -> None:
    client = cluster1.client()
    with pytest.raises(InvalidArgument):
        client.kv.put("bad\x00key", b"x")
    with pytest.raises(NameTooLong):
        client.kv.put("k" * 5000, b"x")
    client.fs.mkdir("/jail")
    with client.fs.open("/jail/../../escape", "wb") as handle:   # '..' stops at the root
        handle.write(b"inside")
    assert client.fs.stat("/escape").size == 6
    with pytest.raises(NotFound):
        client.fs.stat("/jail/escape")


def test_policy_inheritance_and_cache_class_replicas(cluster3: Cluster) -> None:
    fs = cluster3.client().fs
    fs.mkdir("/l2cache")
    fs.set_policy("/l2cache", Policy(storage_class=StorageClass.CACHE, ttl_ms=3_600_000))
    fs.mkdir("/l2cache/model-a")
    policy = fs.get_policy("/l2cache/model-a")
    assert policy.policy.storage_class == StorageClass.CACHE and policy.path == "/l2cache"
    with fs.open("/l2cache/model-a/chunk", "wb") as handle:
        handle.write(b"x" * 100)
    blocks = fs.master.get_blocks(fs.stat("/l2cache/model-a/chunk").ino).blocks
    assert [len(b.worker_ids) for b in blocks] == [1], "cache class keeps one replica"


def test_truncate_into_a_block_then_read_and_extend(cluster1: Cluster) -> None:
    fs = cluster1.client().fs
    data = random_bytes(3 * MiB + 100, seed=3)
    with fs.open("/shrink", "wb") as handle:
        handle.write(data)
    with fs.open("/shrink", "r+b") as handle:
        handle.truncate(MiB + MiB // 2)
    with fs.open("/shrink") as handle:
        assert handle.read() == data[:MiB + MiB // 2]
    with fs.open("/shrink", "r+b") as handle:
        handle.truncate(2 * MiB)     # the cut-off bytes must come back as zeros, not old data
    with fs.open("/shrink") as handle:
        assert handle.read() == data[:MiB + MiB // 2] + bytes(MiB // 2)
