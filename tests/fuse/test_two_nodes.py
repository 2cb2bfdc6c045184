"""Two nodes: two mounts of one cluster, each mount process in its own network namespace
(tests/netns.py; the cluster listens on the bridge address, so all traffic crosses veth links).
The mounts stay in this mount namespace (`nsenter --net` only), so the test reads both.

Close-to-open: a file closed on A is seen whole on B at its next open; renames and unlinks are
seen; LMCache's fs:// pattern (write x.tmp, os.replace to x) never shows partial content on B; a
name created on A is found by stat on B at once (no negative caching); B's page cache serves an
unchanged file's re-open and never a file A rewrote.
"""
from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import random
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from curvine_py.fuse.pagecache import STATS_XATTR
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes, wait_until
from tests.netns import network_namespaces

TOKEN = "two-node-test-token"
MiB = 1 << 20


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mount, Mount, Cluster]]:
    root = tmp_path_factory.mktemp("two-nodes")
    with network_namespaces(2) as lab:
        host = ["--host", lab.root_address]
        with Cluster(root / "cluster", workers=2, token=TOKEN, master_args=host, worker_args=host) as cluster:
            mounts = [Mount(cluster.master_address, root / f"mnt-{i}", token=TOKEN,
                            prefix=["nsenter", f"--net=/run/netns/{ns.name}"], args=["--node", f"host{i}"])
                      for i, ns in enumerate(lab)]
            with mounts[0], mounts[1]:
                yield mounts[0], mounts[1], cluster


def test_close_to_open(nodes: tuple[Mount, Mount, Cluster]) -> None:
    a, b, _ = nodes
    v1, v2 = random_bytes(3 * MiB + 17, seed=1), random_bytes(5 * MiB + 3, seed=2)
    (a.path / "c2o").write_bytes(v1)
    assert (b.path / "c2o").read_bytes() == v1
    with open(a.path / "c2o", "r+b") as writer:
        writer.write(v2)
        writer.flush()
        assert (b.path / "c2o").read_bytes() == v1, "uncommitted writes on A are not visible on B"
    assert (b.path / "c2o").read_bytes() == v2, "seen whole on B at the next open after A closed"
    with open(a.path / "c2o", "wb") as writer:
        writer.write(b"short")
    assert (b.path / "c2o").read_bytes() == b"short"


def test_rename_and_unlink_are_seen(nodes: tuple[Mount, Mount, Cluster]) -> None:
    a, b, _ = nodes
    (a.path / "moving").write_bytes(b"m")
    assert (b.path / "moving").read_bytes() == b"m"
    os.rename(a.path / "moving", a.path / "moved")
    wait_until(lambda: not (b.path / "moving").exists(), 3, "old name gone on B (entry timeout 1 s)")
    assert (b.path / "moved").read_bytes() == b"m"
    os.unlink(a.path / "moved")
    wait_until(lambda: not (b.path / "moved").exists(), 3, "unlinked name gone on B")
    (a.path / "dir").mkdir()
    (a.path / "dir" / "f").write_bytes(b"")
    assert os.listdir(b.path / "dir") == ["f"]
    os.unlink(a.path / "dir" / "f")
    assert os.listdir(b.path / "dir") == []


def test_stat_of_a_name_created_on_a_succeeds_on_b_at_once(nodes: tuple[Mount, Mount, Cluster]) -> None:
    a, b, _ = nodes
    (a.path / "poll").mkdir()
    for i in range(20):
        name = f"chunk-{i}.pt"
        with pytest.raises(FileNotFoundError):
            os.stat(b.path / "poll" / name)     # LMCache polls before the object exists
        (a.path / "poll" / name).write_bytes(b"kv")
        assert os.stat(b.path / "poll" / name).st_size == 2, "no negative entry was cached on B"


def test_a_hot_directory_on_b_still_sees_a_s_changes(nodes: tuple[Mount, Mount, Cluster]) -> None:
    """B stats many names of one directory, so it holds a page of them (fuse/names.py). A's
    changes must still show on B as without it: a new name at once, a replaced file's new
    content at B's next open, an unlinked name gone within the entry timeout (1 s)."""
    a, b, _ = nodes
    (a.path / "hot").mkdir()
    for i in range(200):
        (a.path / "hot" / f"n{i:03d}").write_bytes(b"old")
    time.sleep(1.1)     # B's kernel has nothing cached for these names
    for i in range(100):
        assert os.stat(b.path / "hot" / f"n{i:03d}").st_size == 3
    # Names B has not looked at yet (n100..) are now held by B's mount: A changes some of them.
    tmp = a.path / "hot" / "n150.tmp"
    tmp.write_bytes(b"brand new")
    os.replace(tmp, a.path / "hot" / "n150")
    os.unlink(a.path / "hot" / "n160")
    (a.path / "hot" / "n170").write_bytes(b"rewritten in place")
    (a.path / "hot" / "fresh").write_bytes(b"x")
    assert os.stat(b.path / "hot" / "fresh").st_size == 1, "a new name is seen at once"
    assert (b.path / "hot" / "n150").read_bytes() == b"brand new", "replaced: new content at open"
    assert (b.path / "hot" / "n170").read_bytes() == b"rewritten in place", "close-to-open"
    wait_until(lambda: not (b.path / "hot" / "n160").exists(), 1.5, "unlinked name gone within the timeout")
    assert os.stat(b.path / "hot" / "n199").st_size == 3


def test_a_directory_leased_by_b_still_sees_a_s_new_names_at_once(nodes: tuple[Mount, Mount, Cluster]) -> None:
    """B creates files in a directory of its own and stats names that are not there, so it takes a
    directory lease and answers such misses itself (fuse/leases.py). A's create there recalls the
    lease before it is acknowledged: B finds the name at once, as without a lease."""
    a, b, cluster = nodes
    client = cluster.client()
    (b.path / "leased").mkdir()
    before = client.master.report().dir_leases     # leases taken in the tests above
    for i in range(12):
        with pytest.raises(FileNotFoundError):
            os.stat(b.path / "leased" / f"later-{i}")
        (b.path / "leased" / f"b-{i}").write_bytes(b"b")
    wait_until(lambda: client.master.report().dir_leases == before + 1, 3, "B holds a lease on the directory")
    with pytest.raises(FileNotFoundError):
        os.stat(b.path / "leased" / "later-0")      # answered by B's mount
    with pytest.raises(OSError) as too_long:
        os.stat(b.path / "leased" / ("n" * 256))
    assert too_long.value.errno == errno.ENAMETOOLONG, "the same error as without a lease"
    assert os.stat(b.path / "leased" / "b-11").st_size == 1, "B's own new names are in its lease"
    (a.path / "leased" / "later-0").write_bytes(b"from a")
    assert os.stat(b.path / "leased" / "later-0").st_size == 6, "A's name is seen on B at once"
    assert client.master.report().dir_leases == before, "B gave the lease back"
    assert sorted(os.listdir(a.path / "leased")) == sorted([f"b-{i}" for i in range(12)] + ["later-0"])


def test_a_reader_on_b_finishes_a_file_a_replaced_meanwhile(nodes: tuple[Mount, Mount, Cluster]) -> None:
    """No master knows of B's open handle, so A's os.replace frees the old file at once; the
    master's unlink grace (3 s in tests, 60 s by default) keeps its blocks on the workers, so B,
    reading with O_DIRECT (every byte from the workers), still reads all of the old content."""
    a, b, _ = nodes
    old = random_bytes(12 * MiB, seed=7)
    (a.path / "chunk").write_bytes(old)
    fd = os.open(b.path / "chunk", os.O_RDONLY | os.O_DIRECT)
    buffer = mmap.mmap(-1, MiB)
    try:
        assert os.preadv(fd, [buffer], 0) == MiB and buffer[:] == old[:MiB]
        (a.path / "chunk.tmp").write_bytes(b"new")
        os.replace(a.path / "chunk.tmp", a.path / "chunk")
        time.sleep(1.5)          # five heartbeats: the workers would have deleted the old blocks
        for offset in range(MiB, len(old), MiB):
            assert os.preadv(fd, [buffer], offset) == MiB
            assert buffer[:] == old[offset:offset + MiB], f"old content at {offset}"
    finally:
        os.close(fd)
        buffer.close()
    assert (b.path / "chunk").read_bytes() == b"new"


def _payload(seed: int) -> bytes:
    size = random.Random(seed).randrange(64 * 1024, 3 * MiB)
    body = random_bytes(size, seed=seed)
    return struct.pack("<QQ", seed, size) + hashlib.sha256(body).digest() + body


def _check(data: bytes) -> int:
    """The seed of a complete payload; raises AssertionError on anything partial or mixed."""
    assert len(data) >= 48, f"partial: {len(data)} bytes"
    seed, size = struct.unpack_from("<QQ", data)
    assert len(data) == 48 + size, f"partial: {len(data)} of {48 + size} bytes (seed {seed})"
    assert hashlib.sha256(data[48:]).digest() == data[16:48], f"mixed content (seed {seed})"
    return int(seed)


def test_lmcache_pattern_never_shows_partial_content(nodes: tuple[Mount, Mount, Cluster]) -> None:
    a, b, _ = nodes
    (a.path / "kv").mkdir()
    final_a, final_b = a.path / "kv" / "chunk.pt", b.path / "kv" / "chunk.pt"
    seen: list[int] = []
    misses: list[int] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                data = final_b.read_bytes()
            except FileNotFoundError:
                misses.append(errno.ENOENT)
                continue
            except OSError as exc:   # the version being read was replaced and freed meanwhile
                misses.append(exc.errno or -1)
                continue
            seen.append(_check(data))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for seed in range(1, 31):
            tmp = a.path / "kv" / f"chunk.pt.tmp{seed}"
            tmp.write_bytes(_payload(seed))
            os.replace(tmp, final_a)
            time.sleep(0.05)
    finally:
        done.set()
        thread.join(60)
    print(f"reader: {len(seen)} whole versions, misses {misses}")
    assert _check(final_b.read_bytes()) == 30
    assert len(seen) >= 10, f"reader saw too few versions ({len(seen)}; misses {misses[:20]})"
    assert seen == sorted(seen), "versions appear in order"
    assert set(misses) <= {errno.ENOENT, errno.EIO, errno.ESTALE}, misses


def _reads(mount: Mount) -> int:
    return int(json.loads(os.getxattr(mount.path, STATS_XATTR))["reads"])


def test_a_file_rewritten_on_a_is_read_new_on_b_even_when_b_had_it_cached(
        nodes: tuple[Mount, Mount, Cluster]) -> None:
    a, b, _ = nodes
    v1, v2 = random_bytes(4 * MiB, seed=41), random_bytes(4 * MiB, seed=42)
    (a.path / "cached").write_bytes(v1)
    assert (b.path / "cached").read_bytes() == v1
    before = _reads(b)
    assert (b.path / "cached").read_bytes() == v1
    assert _reads(b) == before, "B's second open of the unchanged file is served from its page cache"
    with open(a.path / "cached", "r+b") as writer:      # same size, rewritten in place on A
        writer.write(v2)
    before = _reads(b)
    assert (b.path / "cached").read_bytes() == v2, "B's next open reads what A committed"
    assert _reads(b) > before
