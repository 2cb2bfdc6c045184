"""Open-to-open validation of the kernel's page cache (fuse/pagecache.py), on a real mount.

What crosses FUSE is measured with the mount's own request counters (the `user.curvine.stats`
xattr of the mount's root: READ requests that reached the Operations), never with times: an
unchanged file's second open is served from the kernel's cache (0 READs), and nothing this
mount or another client does to a file lets stale cached bytes be read at its next open. The
two-node form (another mount in another network namespace rewrites the file) is in
test_two_nodes.py.
"""
from __future__ import annotations

import json
import mmap
import os
import pathlib
import tempfile
from collections.abc import Iterator

import pytest

from curvine_py.fuse.pagecache import STATS_XATTR
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes

MiB = 1 << 20


def stats(mount: Mount) -> dict[str, int]:
    counters: dict[str, int] = json.loads(os.getxattr(mount.path, STATS_XATTR))
    return counters


def write_elsewhere(cluster: Cluster, mount: Mount, path: pathlib.Path, data: bytes, mode: str = "wb") -> None:
    """Writes `path` (a file under `mount`) through the client library, as another node would.

    Why not through the mount: while a file written here is still open (the kernel sends RELEASE
    after close returns), stat shows the time of its last write as mtime, and after the release the
    commit's: the kernel then drops its cache once (auto_inval_data), which would blur the counts."""
    client = cluster.client()
    try:
        with client.fs.open("/" + str(path.relative_to(mount.path)), mode) as fh:
            fh.write(data)
    finally:
        client.close()


def read_counted(mount: Mount, path: pathlib.Path) -> tuple[bytes, int]:
    """The file's bytes (one open, read to the end) and the READ requests that reached the mount."""
    before = stats(mount)["reads"]
    with open(path, "rb") as fh:
        data = fh.read()
    return data, stats(mount)["reads"] - before


@pytest.fixture
def uncached_mount(shared_cluster: Cluster) -> Iterator[Mount]:
    """A second mount of the same cluster with `-o no_keep_cache` (the old behaviour)."""
    where = pathlib.Path(tempfile.mkdtemp(prefix="curvine-nokeep-"))
    try:
        with Mount(shared_cluster.master_address, where, args=["-o", "no_keep_cache"]) as m:
            yield m
    finally:
        where.rmdir()


def test_an_unchanged_files_second_open_is_served_from_the_kernel_cache(d: pathlib.Path, shared_mount: Mount,
                                                                       shared_cluster: Cluster) -> None:
    data = random_bytes(4 * MiB + 5, seed=11)
    path = d / "chunk"
    write_elsewhere(shared_cluster, shared_mount, path, data)
    first, cold_reads = read_counted(shared_mount, path)
    assert first == data
    assert cold_reads >= 4, "the first open on this node reads through the mount"
    kept_before = stats(shared_mount)["opens_kept_cache"]
    for _ in range(3):
        again, warm_reads = read_counted(shared_mount, path)
        assert again == data
        assert warm_reads == 0, "an unchanged file's re-open is answered from the page cache"
    assert stats(shared_mount)["opens_kept_cache"] - kept_before == 3


def test_no_keep_cache_drops_the_cache_at_every_open(d: pathlib.Path, shared_mount: Mount,
                                                     uncached_mount: Mount) -> None:
    data = random_bytes(2 * MiB, seed=12)
    (d / "f").write_bytes(data)
    path = uncached_mount.path / d.name / "f"
    for _ in range(3):
        got, reads = read_counted(uncached_mount, path)
        assert got == data and reads >= 2, "-o no_keep_cache: every open reads through the mount"
    assert stats(uncached_mount)["opens_kept_cache"] == 0


def test_a_file_rewritten_by_another_client_is_read_new_at_the_next_open(d: pathlib.Path, shared_mount: Mount,
                                                                          shared_cluster: Cluster) -> None:
    v1, v2 = random_bytes(3 * MiB, seed=13), random_bytes(3 * MiB, seed=14)
    path = d / "shared"
    write_elsewhere(shared_cluster, shared_mount, path, v1)
    assert read_counted(shared_mount, path)[0] == v1
    assert read_counted(shared_mount, path) == (v1, 0), "cached"
    write_elsewhere(shared_cluster, shared_mount, path, v2, "r+b")    # same size, in place
    got, reads = read_counted(shared_mount, path)
    assert got == v2, "a commit elsewhere is seen at the next open even though the old bytes were cached"
    assert reads >= 3


def test_a_local_write_never_leaves_stale_cached_bytes(d: pathlib.Path, shared_mount: Mount,
                                                      shared_cluster: Cluster) -> None:
    v1 = random_bytes(2 * MiB, seed=15)
    path = d / "w"
    write_elsewhere(shared_cluster, shared_mount, path, v1)
    read_counted(shared_mount, path)
    assert read_counted(shared_mount, path) == (v1, 0)
    patch = random_bytes(4096, seed=16)
    with open(path, "r+b") as fh:            # through the page cache
        fh.seek(MiB)
        fh.write(patch)
    expected = v1[:MiB] + patch + v1[MiB + 4096:]
    assert read_counted(shared_mount, path)[0] == expected
    # Around the page cache: an O_DIRECT write of one aligned page.
    page = mmap.mmap(-1, 4096)
    page.write(random_bytes(4096, seed=17))
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        assert os.pwrite(fd, page, 8192) == 4096
    finally:
        os.close(fd)
    expected = expected[:8192] + bytes(page) + expected[8192 + 4096:]
    got, reads = read_counted(shared_mount, path)
    assert got == expected and reads > 0, "the open after a local write drops the cache"


def test_a_truncate_never_leaves_stale_cached_bytes(d: pathlib.Path, shared_mount: Mount,
                                                   shared_cluster: Cluster) -> None:
    v1 = random_bytes(2 * MiB, seed=18)
    path = d / "t"
    write_elsewhere(shared_cluster, shared_mount, path, v1)
    read_counted(shared_mount, path)
    assert read_counted(shared_mount, path) == (v1, 0)
    os.truncate(path, 1000)
    os.truncate(path, 2 * MiB)               # what was cut off must read back as zeros
    assert read_counted(shared_mount, path)[0] == v1[:1000] + bytes(2 * MiB - 1000)
    with open(path, "r+b") as fh:            # O_TRUNC of a cached file, then new content
        fh.truncate(0)
        fh.write(b"new")
    assert read_counted(shared_mount, path)[0] == b"new"
    with open(path, "wb") as fh:
        fh.write(b"again")
    assert read_counted(shared_mount, path)[0] == b"again"


def test_a_rename_over_a_cached_file_reads_the_new_file(d: pathlib.Path, shared_mount: Mount,
                                                        shared_cluster: Cluster) -> None:
    v1, v2 = random_bytes(2 * MiB, seed=19), random_bytes(2 * MiB, seed=20)
    final = d / "chunk.pt"
    write_elsewhere(shared_cluster, shared_mount, final, v1)
    read_counted(shared_mount, final)
    assert read_counted(shared_mount, final) == (v1, 0)
    tmp = d / "chunk.pt.tmp"
    tmp.write_bytes(v2)
    os.replace(tmp, final)                   # LMCache's pattern, on the same node
    got, reads = read_counted(shared_mount, final)
    assert got == v2 and reads > 0


def test_a_re_open_while_another_descriptor_is_open_sees_a_commit_elsewhere(
        d: pathlib.Path, shared_mount: Mount, shared_cluster: Cluster) -> None:
    v1, v2 = random_bytes(MiB, seed=21), random_bytes(MiB, seed=22)
    path = d / "held"
    write_elsewhere(shared_cluster, shared_mount, path, v1)
    with open(path, "rb") as held:           # keeps the mount's open file: re-opens refresh it
        assert held.read() == v1
        assert read_counted(shared_mount, path) == (v1, 0)
        write_elsewhere(shared_cluster, shared_mount, path, v2, "r+b")
        assert read_counted(shared_mount, path)[0] == v2


@pytest.fixture
def long_cache_mount(shared_cluster: Cluster) -> Iterator[Mount]:
    """Attributes and names cached 30 s: the kernel never notices a change elsewhere by itself
    (auto_inval_data only looks at attributes it fetched), and noatime: no open drops the cache
    for an atime to move (relatime drops it after a change), so only the open's validation can."""
    where = pathlib.Path(tempfile.mkdtemp(prefix="curvine-long-"))
    try:
        with Mount(shared_cluster.master_address, where,
                   args=["--attr-timeout", "30", "--entry-timeout", "30", "-o", "noatime"]) as m:
            yield m
    finally:
        where.rmdir()


@pytest.mark.parametrize("grow", [0, 3 * MiB + 7], ids=["same-size", "grown"])
def test_a_commit_elsewhere_is_read_at_the_next_open_even_with_long_attribute_caching(
        d: pathlib.Path, shared_mount: Mount, shared_cluster: Cluster, long_cache_mount: Mount, grow: int) -> None:
    v1 = random_bytes(2 * MiB, seed=23)
    v2 = random_bytes(2 * MiB + grow, seed=24)
    path = long_cache_mount.path / d.name / "f"
    write_elsewhere(shared_cluster, long_cache_mount, path, v1)
    assert read_counted(long_cache_mount, path)[0] == v1
    assert read_counted(long_cache_mount, path) == (v1, 0), "cached"
    write_elsewhere(shared_cluster, long_cache_mount, path, v2, "r+b")
    got, reads = read_counted(long_cache_mount, path)
    assert got == v2, "the open saw the new version: cache dropped, attributes asked again"
    assert reads > 0
    assert read_counted(long_cache_mount, path) == (v2, 0), "and that version is cached in turn"
