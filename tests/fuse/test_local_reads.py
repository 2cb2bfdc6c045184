"""Short-circuit reads in the mount's trio thread (fuse/localfds.py): a block of a worker on the
mount's own node is read through its stored file's descriptor, verified chunk by chunk; a bad
local copy is never served (the read falls back to the threaded client: a replica's bytes, or
EIO without one), and a file rewritten elsewhere reads new at its next open."""
from __future__ import annotations

import errno
import os
import pathlib
from collections.abc import Iterator
from dataclasses import replace

import pytest
import trio

from bench.common import evict
from curvine_py.client.buffers import aligned
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader
from tests.fuse.blockreads import flip_byte, range_reader, stored_file, write_blob
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes

MiB = 1 << 20


def test_descriptor_reads_are_verified_and_a_bad_chunk_misses(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "cluster", workers=1) as cluster:
        blob = write_blob(cluster, 3 * MiB + 5000, seed=21)
        data, block, view = blob.data, blob.block, blob.view
        reader = TrioBlockReader(token=cluster.token, timeout_s=5.0, max_payload=256 * MiB,
                                 is_local=lambda _worker: True)
        read = range_reader(reader, view, block)

        async def scenario() -> None:
            assert await read(0, MiB) == data[:MiB]
            assert await read(MiB + 7, 100) == data[MiB + 7:MiB + 107], "a piece inside a chunk"
            assert await read(3 * MiB, 5000) == data[3 * MiB:], "the short last chunk"
            assert (reader.local.hits, reader.local.opened) == (3, 1), "one descriptor for the block"
            flip_byte(stored_file(cluster, 0, block.block_id), len(data), 2 * MiB + 10)
            with pytest.raises(FastPathMiss, match="fails its digest"):
                await read(2 * MiB, MiB)
            assert await read(0, MiB) == data[:MiB], "the good chunks still read, through a new descriptor"
            assert reader.local.opened == 2
            bogus = replace(block, block_id=block.block_id + 999, length=MiB, checksum=0)
            with pytest.raises(FastPathMiss):
                await reader.read(view, bogus, 0, MiB, aligned(MiB), MiB)
            cluster.kill_worker(0)
            # A kept descriptor still reads its (immutable) block; a new block needs the worker.
            assert await read(0, MiB) == data[:MiB]
            with trio.fail_after(10), pytest.raises(FastPathMiss):
                await reader.read(view, bogus, 0, MiB, aligned(MiB), MiB)

        trio.run(scenario)
        reader.close()


@pytest.fixture
def local_rig(tmp_path: pathlib.Path) -> Iterator[tuple[Cluster, Mount]]:
    """Two workers (node0, node1), the mount on node0: node0's copies are read by descriptor."""
    with Cluster(tmp_path / "cluster", workers=2) as cluster, \
            Mount(cluster.master_address, tmp_path / "mnt", args=["--node", "node0"]) as mount:
        yield cluster, mount


@pytest.fixture
def lone_rig(tmp_path: pathlib.Path) -> Iterator[tuple[Cluster, Mount]]:
    """One worker (node0) and the mount on its node: every copy is local and the only one."""
    with Cluster(tmp_path / "cluster", workers=1) as cluster, \
            Mount(cluster.master_address, tmp_path / "mnt", args=["--node", "node0"]) as mount:
        yield cluster, mount


def test_a_corrupt_local_copy_is_served_from_the_replica(local_rig: tuple[Cluster, Mount]) -> None:
    cluster, mount = local_rig
    client = cluster.client()
    data = random_bytes(3 * MiB, seed=22)
    (mount.path / "both.bin").write_bytes(data)
    blocks = client.master.get_blocks(client.fs.stat("/both.bin").ino).blocks
    assert len(blocks) == 1 and sorted(blocks[0].worker_ids) == sorted([cluster.worker_id(0), cluster.worker_id(1)])
    evict(mount.path / "both.bin")
    assert (mount.path / "both.bin").read_bytes() == data
    flip_byte(stored_file(cluster, 0, blocks[0].block_id), len(data), MiB + 5)
    evict(mount.path / "both.bin")
    assert (mount.path / "both.bin").read_bytes() == data, "the replica's bytes, never the bad copy's"


def test_a_corrupt_only_copy_fails_eio(lone_rig: tuple[Cluster, Mount]) -> None:
    cluster, mount = lone_rig
    client = cluster.client()
    data = random_bytes(2 * MiB, seed=23)
    (mount.path / "one.bin").write_bytes(data)
    block = client.master.get_blocks(client.fs.stat("/one.bin").ino).blocks[0]
    evict(mount.path / "one.bin")
    assert (mount.path / "one.bin").read_bytes() == data
    flip_byte(stored_file(cluster, 0, block.block_id), len(data), MiB + 5)
    evict(mount.path / "one.bin")
    with open(mount.path / "one.bin", "rb", buffering=0) as fh:
        assert fh.read(4096) == data[:4096], "the good chunk still reads"
        with pytest.raises(OSError) as failed:
            os.pread(fh.fileno(), MiB, MiB)
    assert failed.value.errno == errno.EIO


def test_a_file_rewritten_elsewhere_reads_new_at_its_next_open(lone_rig: tuple[Cluster, Mount]) -> None:
    cluster, mount = lone_rig
    old, new = random_bytes(2 * MiB, seed=24), random_bytes(2 * MiB, seed=25)
    (mount.path / "f.bin").write_bytes(old)
    evict(mount.path / "f.bin")
    assert (mount.path / "f.bin").read_bytes() == old       # its block's descriptor is kept now
    with cluster.client(node="elsewhere").fs.open("/f.bin", "wb") as fh:
        fh.write(new)
    assert (mount.path / "f.bin").read_bytes() == new
