"""Chunks fetched ahead in threads (fuse/prefetch.py with fuse/threadfetch.py, fuse/blockrecv.py):
exact bytes for sizes around chunk, run and block edges, from a TCP owner and from an owner on this
node; a worker killed mid-fetch gives a failover read or EIO, never wrong bytes; a file rewritten
elsewhere while this node holds chunks of its old blocks reads new at its next open; the mount's
memory budget holds (its counters, not time)."""
from __future__ import annotations

import errno
import json
import os
import pathlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bench.common import evict
from curvine_py.core.domain import Policy
from curvine_py.fuse.pagecache import STATS_XATTR
from tests.fuse.blockreads import flip_byte, stored_file
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes, wait_until

MiB = 1 << 20
BLOCK = 6 * MiB          # a run is 4 chunks: blocks of 6 end in a run of 2
FAILURES = {errno.EIO, errno.ETIMEDOUT, errno.EHOSTUNREACH}


def fetching(ahead: int, budget: int = 64 * MiB) -> dict[str, str]:
    return {"CURVINE_FUSE_FETCH_AHEAD": str(ahead), "CURVINE_FUSE_FETCH_BUDGET": str(budget)}


def runs(mount: Mount) -> dict[str, Any]:
    counters: dict[str, Any] = json.loads(os.getxattr(mount.path, STATS_XATTR))
    return dict(counters["runs"])


def small_blocks(cluster: Cluster, directory: str, replicas: int = 0) -> None:
    client = cluster.client()
    client.fs.mkdir(directory)
    client.fs.set_policy(directory, Policy(block_size=BLOCK, replicas=replicas))


def warm_up(writer: Mount, reader: Mount, directory: str) -> None:
    """A first read through `reader`: its membership view is fresh afterwards (until then every read
    goes to the threaded client, which fetches the view; none would go through runs)."""
    (writer.path / directory / "warm").write_bytes(b"w" * MiB)
    assert (reader.path / directory / "warm").read_bytes() == b"w" * MiB


def read_like_lmcache(path: pathlib.Path, size: int) -> bytes:
    """LMCache's fs connector: a 28-byte head, then the rest with readinto."""
    with open(path, "rb") as fh:
        head = fh.read(28)
        rest = bytearray(max(0, size - len(head)))
        n = fh.readinto(rest) if rest else 0
    return head + bytes(rest[:n])


SIZES = [1, MiB - 1, MiB, MiB + 1, 4 * MiB + 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 4 * MiB + 5]


@pytest.mark.parametrize(("local", "threads_here"), [(False, False), (True, False), (True, True)],
                         ids=["tcp-owner", "owner-on-this-node", "owner-on-this-node-in-threads"])
def test_exact_bytes_around_chunk_run_and_block_edges(tmp_path: pathlib.Path, local: bool,
                                                      threads_here: bool) -> None:
    with Cluster(tmp_path / "cluster", workers=1) as cluster:
        small_blocks(cluster, "/edges")
        node = "node0" if local else "elsewhere"
        env = {**fetching(8 * MiB), "CURVINE_FUSE_FETCH_LOCAL": "1" if threads_here else "0"}
        with Mount(cluster.master_address, tmp_path / "w") as writer, \
                Mount(cluster.master_address, tmp_path / "r", args=["--node", node], env=env) as reader:
            blobs = {size: random_bytes(size, seed=size % 997) for size in SIZES}
            for size, data in blobs.items():
                (writer.path / "edges" / f"f{size}").write_bytes(data)
            for size, data in blobs.items():
                path = reader.path / "edges" / f"f{size}"
                assert path.read_bytes() == data, f"sequential read of {size} bytes"
                evict(path)
                assert read_like_lmcache(path, size) == data, f"fs:// pattern read of {size} bytes"
            # Reads that start mid-chunk and cross a run's and a block's end.
            big = blobs[SIZES[-1]]
            fd = os.open(reader.path / "edges" / f"f{SIZES[-1]}", os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                for offset in (3 * MiB + 4096, BLOCK - 5, 2 * BLOCK - MiB // 2):
                    assert os.pread(fd, 2 * MiB, offset) == big[offset:offset + 2 * MiB], f"pread at {offset}"
            finally:
                os.close(fd)
            counters = runs(reader)
            if local and not threads_here:     # read by descriptor on the trio thread (fuse/localfds.py)
                assert counters["runs"] == 0, counters
            else:
                assert counters["ahead"] > 0 and counters["fetched_bytes"] > 0, counters
                assert counters["failed"] == 0, counters


@pytest.mark.parametrize("workers", [2, 1], ids=["a-replica-left", "no-copy-left"])
def test_a_worker_killed_mid_fetch_gives_a_failover_read_or_eio(tmp_path: pathlib.Path, workers: int) -> None:
    size = 48 * MiB
    with Cluster(tmp_path / "cluster", workers=workers) as cluster:
        small_blocks(cluster, "/d", replicas=workers)
        with Mount(cluster.master_address, tmp_path / "w") as writer, \
                Mount(cluster.master_address, tmp_path / "r", args=["--node", "elsewhere"],
                      env=fetching(8 * MiB, budget=16 * MiB)) as reader:
            data = random_bytes(size, seed=40 + workers)
            (writer.path / "d" / "f").write_bytes(data)
            warm_up(writer, reader, "d")
            client = cluster.client()
            blocks = client.master.get_blocks(client.fs.stat("/d/f").ino).blocks
            assert all(len(b.worker_ids) == workers for b in blocks), "every block on every worker"
            # The worker the runs ask first (the first holder) is the one that dies.
            victim = next(i for i in range(workers) if cluster.worker_id(i) == blocks[1].worker_ids[0])
            got, error = bytearray(), None
            with open(reader.path / "d" / "f", "rb", buffering=0) as fh:
                got += fh.read(4 * MiB)
                assert runs(reader)["runs"] > 0, "the fetch ahead has started"
                cluster.kill_worker(victim)
                try:
                    while chunk := fh.read(MiB):
                        got += chunk
                except OSError as exc:
                    error = exc
            assert bytes(got) == data[:len(got)], "what was returned is the file's bytes"
            if workers == 2:
                assert error is None and len(got) == size, f"every byte, through the replica ({error})"
            else:
                assert error is not None and error.errno in FAILURES, error
                assert len(got) < size, "the budget (16 MiB) cannot have held the rest"


def test_a_file_rewritten_elsewhere_reads_new_at_the_next_open(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "cluster", workers=1) as cluster:
        small_blocks(cluster, "/kv")
        with Mount(cluster.master_address, tmp_path / "w") as writer, \
                Mount(cluster.master_address, tmp_path / "r", args=["--node", "elsewhere"],
                      env=fetching(32 * MiB)) as reader:
            old, new = random_bytes(20 * MiB + 3, seed=43), random_bytes(20 * MiB + 3, seed=44)
            (writer.path / "kv" / "f").write_bytes(old)
            warm_up(writer, reader, "kv")
            path = reader.path / "kv" / "f"
            with open(path, "rb", buffering=0) as first:
                assert first.read(MiB) == old[:MiB]     # starts the fetch of the whole file
                wait_until(lambda: runs(reader)["fetched_bytes"] >= len(old) - MiB, 20,
                           "the old content fetched ahead")
                (writer.path / "kv" / "f").write_bytes(new)     # committed at close, elsewhere
                # An open while `first` still holds the old blocks' chunks: close-to-open.
                assert read_like_lmcache(path, len(new)) == new
                assert path.read_bytes() == new
            assert path.read_bytes() == new, "and after the old handle is gone"


def test_the_memory_budget_holds_with_many_readers(tmp_path: pathlib.Path) -> None:
    budget, files = 12 * MiB, 6
    with Cluster(tmp_path / "cluster", workers=1) as cluster:
        small_blocks(cluster, "/many")
        with Mount(cluster.master_address, tmp_path / "w") as writer, \
                Mount(cluster.master_address, tmp_path / "r", args=["--node", "elsewhere"],
                      env=fetching(16 * MiB, budget=budget)) as reader:
            blobs = [random_bytes(10 * MiB + i, seed=50 + i) for i in range(files)]
            for i, data in enumerate(blobs):
                (writer.path / "many" / f"f{i}").write_bytes(data)
            warm_up(writer, reader, "many")
            for _round in range(2):
                for i in range(files):
                    evict(reader.path / "many" / f"f{i}")
                with ThreadPoolExecutor(files) as pool:
                    got = list(pool.map(lambda i: read_like_lmcache(reader.path / "many" / f"f{i}", len(blobs[i])),
                                        range(files)))
                assert got == blobs
            counters = runs(reader)
            assert counters["budget_bytes"] == budget
            assert 0 < counters["peak_bytes"] <= budget, counters
            assert counters["held_bytes"] <= budget, counters
            assert counters["refused"] > 0, f"the budget never bound: {counters}"


def test_a_bad_chunk_of_this_nodes_copy_is_never_served_from_a_thread(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "cluster", workers=1) as cluster:
        small_blocks(cluster, "/bad")
        env = {**fetching(8 * MiB), "CURVINE_FUSE_FETCH_LOCAL": "1"}
        with Mount(cluster.master_address, tmp_path / "r", args=["--node", "node0"], env=env) as mount:
            data = random_bytes(5 * MiB, seed=60)
            (mount.path / "bad" / "f").write_bytes(data)
            warm_up(mount, mount, "bad")
            client = cluster.client()
            block = client.master.get_blocks(client.fs.stat("/bad/f").ino).blocks[0]
            flip_byte(stored_file(cluster, 0, block.block_id), block.length, 2 * MiB + 7)
            evict(mount.path / "bad" / "f")
            fd = os.open(mount.path / "bad" / "f", os.O_RDONLY)
            try:
                for offset in (0, MiB, 2 * MiB, 3 * MiB, 4 * MiB):
                    try:
                        got = os.pread(fd, MiB, offset)
                    except OSError as exc:
                        assert exc.errno == errno.EIO, exc
                        continue
                    assert offset != 2 * MiB, "the bad chunk was served"
                    assert got == data[offset:offset + MiB], f"wrong bytes at {offset}"
            finally:
                os.close(fd)
            assert runs(mount)["failed"] > 0, "its run failed as a whole"
