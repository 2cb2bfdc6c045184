"""Runs of chunks (fuse/prefetch.py): one READ_BLOCK serves several whole-chunk reads from a TCP
owner, every chunk verified; a bad chunk fails its whole run (nothing of it is kept, so the reads
go to the threaded client) and a file rewritten elsewhere reads new at its next open even while
chunks of its old blocks are still held."""
from __future__ import annotations

import mmap
import os
import pathlib

import pytest
import trio

from bench.common import evict
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader
from curvine_py.fuse.prefetch import ChunkRuns
from tests.fuse.blockreads import flip_byte, stored_file, write_blob
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes

MiB = 1 << 20


def test_one_request_serves_a_run_and_a_bad_chunk_fails_it_all(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "cluster", workers=1) as cluster:
        blob = write_blob(cluster, 6 * MiB + 5000, seed=31)
        data, block, view = blob.data, blob.block, blob.view
        reader = TrioBlockReader(token=cluster.token, timeout_s=5.0, max_payload=256 * MiB)
        runs = ChunkRuns(reader, chunks=4, budget=8 * MiB)

        async def chunk(start: int) -> bytes:
            got = bytes(await runs.chunk(view, block, start))
            runs.taken(block, start)
            return got

        async def scenario() -> None:
            assert runs.wanted(view, block, MiB) and not runs.wanted(view, block, 4096)
            for i in range(4):
                assert await chunk(i * MiB) == data[i * MiB:(i + 1) * MiB]
            assert runs.runs == 1, "chunks 1-3 came with chunk 0's request"
            assert await chunk(6 * MiB) == data[6 * MiB:], "the short last chunk"
            assert runs.runs == 2
            flip_byte(stored_file(cluster, 0, block.block_id), len(data), 4 * MiB + 3)
            with pytest.raises(FastPathMiss):
                await chunk(4 * MiB)     # its run (chunks 4-6) fails as a whole
            assert runs.runs == 3
            assert await chunk(5 * MiB) == data[5 * MiB:6 * MiB], "nothing of the failed run was kept"
            assert runs.runs == 4
            with pytest.raises(FastPathMiss):
                await chunk(4 * MiB)
            reader.close()       # trio sockets close inside the event loop

        trio.run(scenario)


def test_whole_chunk_reads_through_the_mount_are_right_and_never_stale(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "cluster", workers=1) as cluster, \
            Mount(cluster.master_address, tmp_path / "mnt", args=["--node", "elsewhere"]) as mount:
        old, new = random_bytes(8 * MiB + 10, seed=32), random_bytes(8 * MiB + 10, seed=33)
        path = mount.path / "f.bin"
        path.write_bytes(old)
        evict(path)
        assert path.read_bytes() == old
        evict(path)
        with open(path, "rb", buffering=0) as fh:
            assert os.pread(fh.fileno(), MiB, 0) == old[:MiB]   # the rest of its run stays held
        with cluster.client(node="writer").fs.open("/f.bin", "wb") as fh:
            fh.write(new)
        assert path.read_bytes() == new


def test_a_read_across_two_chunks_returns_both(tmp_path: pathlib.Path) -> None:
    """A 1 MiB request that starts inside a chunk and ends in the next (the kernel sends these
    after a small first read shifts its windows) gets every byte of both: once the second chunk
    was answered alone, the kernel took the short reply for the end of the file and the reader
    saw EOF 1 MiB early. O_DIRECT preads reach the mount as exactly these requests."""
    with Cluster(tmp_path / "cluster", workers=1) as cluster, \
            Mount(cluster.master_address, tmp_path / "mnt", args=["--node", "elsewhere"]) as mount:
        data = random_bytes(4 * MiB + 28, seed=34)
        path = mount.path / "kv.bin"
        path.write_bytes(data)
        buffer = memoryview(mmap.mmap(-1, MiB))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            for offset in (3 * MiB + 4096, MiB + 8192, 0):   # into the short last chunk, a middle one
                got = os.preadv(fd, [buffer], offset)
                want = data[offset:offset + MiB]
                assert got == len(want) and buffer[:got] == want, f"read at {offset}"
        finally:
            os.close(fd)
        assert os.stat(path).st_size == len(data)
