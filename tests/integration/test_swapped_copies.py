"""A stored file mixed up on a worker's disk is never served as another (issue 29, item 1).

Two block files swapped by hand (`blocks/01/...01` <-> `blocks/02/...02`) are each a consistent
stored file whose chunk digests match its own bytes: only the block id in the header, and the
whole-block checksum the master recorded at commit, tell that it is not the block asked for. The
worker compares both before it serves a byte: the library, the CLI and `fsck --scrub` see the
copies as corrupt (EIO, or the other replica), the worker drops them, and a KV object under
another key's name is a miss that is dropped too (no EXISTS hit that every GET then misses).
"""
from __future__ import annotations

import errno
import os
import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.core import layout
from curvine_py.core.domain import BlockInfo, Policy, StorageClass
from curvine_py.core.errors import CurvineError
from curvine_py.core.frames import Op
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli
from tests.integration.test_worker_process import address_of
from tests.unit.test_worker_server import WireClient

MiB = 1 << 20
SIZE = MiB + 4321       # two chunks, one block


def block_path(cluster: Cluster, index: int, block_id: int) -> pathlib.Path:
    name = layout.block_file_name(block_id)
    return cluster.worker_dir(index) / "blocks" / layout.shard_dir(name) / name


def object_path(cluster: Cluster, index: int, key: str) -> pathlib.Path:
    name = layout.object_file_name(key)
    return cluster.worker_dir(index) / "kv" / layout.shard_dir(name) / name


def swap(one: pathlib.Path, other: pathlib.Path) -> None:
    """Exchanges two stored files by rename, as a careless restore would."""
    aside = one.with_name(one.name + ".swap")
    os.rename(one, aside)
    os.rename(other, one)
    os.rename(aside, other)


def only_block(cluster: Cluster, path: str) -> BlockInfo:
    client = cluster.client()
    blocks = client.master.get_blocks(client.fs.stat(path).ino).blocks
    assert len(blocks) == 1
    return blocks[0]


@pytest.fixture
def one_worker(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=1) as cluster:
        cluster.wait_for_live_workers(1)
        yield cluster


def write_pair(cluster: Cluster) -> tuple[bytes, bytes, BlockInfo, BlockInfo]:
    """/d/a and /d/b, one block each, written and never read (no worker holds them open)."""
    client = cluster.client()
    client.fs.mkdir("/d")
    a, b = random_bytes(SIZE, seed=1), random_bytes(SIZE, seed=2)
    for path, data in (("/d/a", a), ("/d/b", b)):
        with client.fs.open(path, "wb") as f:
            f.write(data)
    return a, b, only_block(cluster, "/d/a"), only_block(cluster, "/d/b")


@pytest.mark.parametrize("node", ["elsewhere", "node0"], ids=["tcp", "short-circuit"])
def test_a_swapped_block_is_eio_through_the_library(one_worker: Cluster, node: str) -> None:
    cluster = one_worker
    _a, _b, block_a, block_b = write_pair(cluster)
    swap(block_path(cluster, 0, block_a.block_id), block_path(cluster, 0, block_b.block_id))
    client = cluster.client(node=node)
    worker = next(iter(client.membership.view().workers.values()))
    assert client.io.is_local(worker) == (node == "node0")
    for path in ("/d/a", "/d/b"):
        with pytest.raises(CurvineError) as failed, client.fs.open(path) as f:
            f.read()
        assert failed.value.errno == errno.EIO, failed.value
    # Both misplaced copies were dropped by the worker, and it reports them bad to the master.
    assert not block_path(cluster, 0, block_a.block_id).exists()
    assert not block_path(cluster, 0, block_b.block_id).exists()
    wait_until(lambda: only_block(cluster, "/d/a").worker_ids == (), 10, "the bad copy reported to the master")


def test_a_swapped_copy_is_read_from_the_other_replica(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=2) as cluster:
        client = cluster.client()
        client.fs.mkdir("/durable")
        client.fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, replicas=2))
        (path_a, a), (path_b, b) = ("/durable/a", random_bytes(SIZE, seed=1)), ("/durable/b", random_bytes(SIZE, seed=2))
        for path, data in ((path_a, a), (path_b, b)):
            with client.fs.open(path, "wb") as f:
                f.write(data)
        block_a, block_b = only_block(cluster, path_a), only_block(cluster, path_b)
        assert len(block_a.worker_ids) == len(block_b.worker_ids) == 2
        swap(block_path(cluster, 0, block_a.block_id), block_path(cluster, 0, block_b.block_id))
        for node in ("elsewhere", "node0"):       # by TCP and by descriptor from worker 0
            reader = cluster.client(node=node)
            with reader.fs.open(path_a) as f:
                assert f.read() == a
            with reader.fs.open(path_b) as f:
                assert f.read() == b
        # A reader drops a misplaced copy it meets, but which replica a read tries first is the
        # placement's and the node's choice; the scrub meets every copy: after it, neither misplaced
        # copy is left (repair may have put the right block back under its name).
        cli("fsck", "--master", cluster.master_address, "--scrub")
        for block in (block_a, block_b):
            assert not holds_another_block(block_path(cluster, 0, block.block_id), block.block_id)


def holds_another_block(path: pathlib.Path, block_id: int) -> bool:
    """True when the file under a block's name is there and holds another block's header."""
    try:
        with path.open("rb") as f:
            header = layout.StoredHeader.decode(f.read(1 << 18))   # a header is at most 64 pages
    except FileNotFoundError:
        return False
    return header.block_id != block_id


def test_a_swapped_block_fails_fs_get(one_worker: Cluster, tmp_path: pathlib.Path) -> None:
    cluster = one_worker
    _a, b, block_a, block_b = write_pair(cluster)
    swap(block_path(cluster, 0, block_a.block_id), block_path(cluster, 0, block_b.block_id))
    out = tmp_path / "a.out"
    got = cli("fs", "--master", cluster.master_address, "get", "/d/a", str(out))
    assert got.returncode != 0, got.stdout.decode() + got.stderr.decode()
    assert b"EIO" in got.stderr, got.stderr.decode()
    assert not out.exists() or b[:4096] not in out.read_bytes(), "never /d/b's bytes"


def test_fsck_scrub_names_swapped_blocks(one_worker: Cluster) -> None:
    cluster = one_worker
    _a, _b, block_a, block_b = write_pair(cluster)
    assert cli("fsck", "--master", cluster.master_address, "--scrub").returncode == 0
    swap(block_path(cluster, 0, block_a.block_id), block_path(cluster, 0, block_b.block_id))
    found = cli("fsck", "--master", cluster.master_address, "--scrub")
    out = found.stdout.decode()
    assert found.returncode == 1, out + found.stderr.decode()
    worker = cluster.worker_id(0)
    assert f"CORRUPT: block {block_a.block_id:x} on worker {worker} (/d/a)" in out, out
    assert f"CORRUPT: block {block_b.block_id:x} on worker {worker} (/d/b)" in out, out
    assert "2 corrupt (dropped)" in out, out


def test_a_block_replaced_under_its_own_id_fails_the_masters_checksum(one_worker: Cluster,
                                                                       tmp_path: pathlib.Path) -> None:
    # The header's id is right, its digests match its bytes, but they are not the bytes committed:
    # only the whole-block checksum the master recorded tells (a misdirected write, a stale restore).
    cluster = one_worker
    _a, b, block_a, _block_b = write_pair(cluster)
    with WireClient(address_of(cluster)) as c:
        c.call(Op.WRITE_BLOCK, DataHeader(block_id=block_a.block_id, length=len(b),
                                          checksum=layout.object_checksum(b)), b)
    client = cluster.client(node="elsewhere")
    with pytest.raises(CurvineError) as failed, client.fs.open("/d/a") as f:
        f.read()
    assert failed.value.errno == errno.EIO
    assert not block_path(cluster, 0, block_a.block_id).exists()

    # The same through fsck --scrub, on a copy nobody read.
    with WireClient(address_of(cluster)) as c:
        c.call(Op.WRITE_BLOCK, DataHeader(block_id=_block_b.block_id, length=len(_a),
                                          checksum=layout.object_checksum(_a)), _a)
    found = cli("fsck", "--master", cluster.master_address, "--scrub")
    out = found.stdout.decode()
    assert found.returncode == 1, out
    assert f"CORRUPT: block {_block_b.block_id:x} on worker {cluster.worker_id(0)} (/d/b)" in out, out


@pytest.mark.parametrize("node", ["elsewhere", "node0"], ids=["tcp", "short-circuit"])
def test_a_swapped_kv_object_is_a_miss_and_dropped(one_worker: Cluster, node: str) -> None:
    cluster = one_worker
    client = cluster.client(node=node)
    one, other = random_bytes(SIZE, seed=3), random_bytes(SIZE, seed=4)
    client.kv.put("key-one", one)
    client.kv.put("key-other", other)
    swap(object_path(cluster, 0, "key-one"), object_path(cluster, 0, "key-other"))
    assert client.kv.get("key-one") is None
    assert client.kv.get("key-other") is None
    # Dropped, not kept as a copy that EXISTS reports and every GET misses.
    assert not client.kv.exists("key-one") and not client.kv.exists("key-other")
    assert not object_path(cluster, 0, "key-one").exists()
    assert not object_path(cluster, 0, "key-other").exists()
    client.kv.put("key-one", one)                 # and the key can be stored again
    assert client.kv.get("key-one") == one
