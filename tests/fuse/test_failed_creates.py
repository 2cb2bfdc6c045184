"""A create-and-write through the mount whose first commit fails (the worker's disk is full)
leaves nothing visible: the name the create made is removed again (issue 11). Driven through
Operations (the middle tier, ending with fsck) and through a real kernel mount, on a worker whose
data dir is a 10 MiB tmpfs claiming 1 GiB (tests/integration/test_failed_writes.py's setup)."""
from __future__ import annotations

import errno
import os
import pathlib
import stat
import tempfile
from collections.abc import Iterator

import pyfuse3
import pytest

from curvine_py.fuse.operations import Operations
from tests.fuse.middle import ROOT_CTX, Rig, fuse_error
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes, small_disk_cluster

MiB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with small_disk_cluster(tmp_path) as cluster:
        yield cluster


def test_failed_first_commit_removes_the_created_name(small_disk: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(small_disk)
    told: list[tuple[int, bytes, int]] = []     # what the kernel is told to forget
    monkeypatch.setattr(pyfuse3, "invalidate_entry",
                        lambda parent, name, deleted=0: told.append((parent, name, deleted)))
    data = random_bytes(12 * MiB, seed=7)

    async def scenario(ops: Operations) -> None:
        durable = (await ops.lookup(1, b"durable", ROOT_CTX)).st_ino  # type: ignore[arg-type]
        info, entry = await ops.create(durable, b"big", stat.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT,
                                       ROOT_CTX)  # type: ignore[arg-type]
        failed_at = None
        for offset in range(0, len(data), MiB):
            try:
                await ops.write(info.fh, offset, data[offset:offset + MiB])
            except pyfuse3.FUSEError as exc:   # ENOSPC as soon as the write-behind of a block failed
                assert exc.errno == errno.ENOSPC, exc
                failed_at = offset
                break
        with fuse_error(errno.ENOSPC):
            await ops.flush(info.fh)
        with fuse_error(errno.ENOENT):   # already gone while the handle is still open
            await ops.lookup(durable, b"big", ROOT_CTX)  # type: ignore[arg-type]
        await ops.release(info.fh)
        assert told == [(durable, b"big", entry.st_ino)]
        assert failed_at is None or failed_at >= 4 * MiB
        assert [e.path for e in rig.client.fs.ls("/durable")] == []
        # A file that was published once stays, even when a later commit fails.
        info, entry = await ops.create(durable, b"small", stat.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT,
                                       ROOT_CTX)  # type: ignore[arg-type]
        await ops.write(info.fh, 0, b"kept")
        await ops.flush(info.fh)
        try:
            for offset in range(4, 12 * MiB, MiB):
                await ops.write(info.fh, offset, data[:MiB])
            await ops.flush(info.fh)
        except pyfuse3.FUSEError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("12 MiB fitted on a 10 MiB disk")
        await ops.release(info.fh)
        assert (await ops.lookup(durable, b"small", ROOT_CTX)).st_ino == entry.st_ino  # type: ignore[arg-type]
        assert rig.client.fs.stat("/durable/small").size == 4
        assert len(told) == 1
        # An existing file opened with O_CREAT (no O_EXCL) is not this create's to remove.
        info, again = await ops.create(durable, b"small", stat.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT,
                                       ROOT_CTX)  # type: ignore[arg-type]
        assert again.st_ino == entry.st_ino
        await ops.release(info.fh)
        with fuse_error(errno.EEXIST):
            await ops.create(durable, b"small", stat.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)


def test_failed_write_through_a_kernel_mount_leaves_no_file(small_disk: Cluster) -> None:
    where = pathlib.Path(tempfile.mkdtemp(prefix="curvine-mnt-"))
    try:
        with Mount(small_disk.master_address, where) as mount:
            target = mount.path / "durable" / "big.bin"
            with pytest.raises(OSError) as raised, open(target, "wb") as fh:
                fh.write(random_bytes(12 * MiB, seed=8))
            assert raised.value.errno == errno.ENOSPC
            assert not target.exists()
            assert os.listdir(mount.path / "durable") == []
    finally:
        where.rmdir()
