"""FUSE middle tier: `Operations` driven directly (fake request context, no kernel) over a real
master and worker. Each scenario ends with the master's fsck of the namespace finding nothing
(Rig.run asserts it), so a handler that leaves a dangling name, a wrong nlink or a lost orphan
fails here before any kernel mount is involved."""
from __future__ import annotations

import errno
import os
import pathlib
import stat
from collections.abc import Iterator

import pytest

from curvine_py.core import layout
from curvine_py.core.posix import RENAME_EXCHANGE, RENAME_NOREPLACE
from curvine_py.fuse.operations import Operations
from tests.fuse.middle import (
    ROOT,
    ROOT_CTX,
    FakeContext,
    Fields,
    Rig,
    cluster_fsck,
    fsck,
    fuse_error,
    patch_readdir,
)
from tests.harness import Cluster, random_bytes

MiB = 1 << 20
USER = FakeContext(uid=1000, gid=1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("middle"), workers=1) as c:
        yield c
        assert fsck(c) == []
        result = cluster_fsck(c)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def rig(cluster: Cluster) -> Rig:
    return Rig(cluster)


async def fresh_dir(ops: Operations, name: str) -> int:
    entry = await ops.mkdir(ROOT, name.encode(), 0o777, ROOT_CTX)  # type: ignore[arg-type]
    return int(entry.st_ino)


async def write_file(ops: Operations, parent: int, name: str, data: bytes, ctx: FakeContext = ROOT_CTX) -> int:
    info, entry = await ops.create(parent, name.encode(), stat.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT,
                                   ctx)  # type: ignore[arg-type]
    assert await ops.write(info.fh, 0, data) == len(data)
    await ops.flush(info.fh)
    await ops.release(info.fh)
    return int(entry.st_ino)


async def read_file(ops: Operations, ino: int, size: int) -> bytes:
    info = await ops.open(ino, os.O_RDONLY, ROOT_CTX)  # type: ignore[arg-type]
    try:
        out = bytearray()
        while len(out) < size:
            piece = bytes(await ops.read(info.fh, len(out), min(MiB, size - len(out))))
            if not piece:
                break
            out += piece
        return bytes(out)
    finally:
        await ops.release(info.fh)


def test_files_written_read_and_removed(rig: Rig) -> None:
    data = random_bytes(3 * MiB + 123, seed=1)

    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "files")
        ino = await write_file(ops, d, "blob", data)
        entry = await ops.lookup(d, b"blob", ROOT_CTX)  # type: ignore[arg-type]
        assert entry.st_ino == ino and entry.st_size == len(data) and stat.S_ISREG(entry.st_mode)
        assert await read_file(ops, ino, len(data)) == data
        assert (await ops.getattr(ino, ROOT_CTX)).st_size == len(data)  # type: ignore[arg-type]
        await ops.unlink(d, b"blob", ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.ENOENT):
            await ops.lookup(d, b"blob", ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.ESTALE):   # the kernel's inode is gone: it re-resolves the path
            await ops.getattr(ino, ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(ROOT, b"files", ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)


def test_unlinked_while_open_stays_readable_until_the_last_release(rig: Rig) -> None:
    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "orphans")
        ino = await write_file(ops, d, "kept", b"still here")
        info = await ops.open(ino, os.O_RDWR, ROOT_CTX)  # type: ignore[arg-type]
        await ops.unlink(d, b"kept", ROOT_CTX)  # type: ignore[arg-type]
        assert fsck(rig.cluster) == [], "an open unlinked file is an orphan, not a leak"
        assert bytes(await ops.read(info.fh, 0, 100)) == b"still here"
        await ops.write(info.fh, 10, b", and more")
        await ops.flush(info.fh)
        assert bytes(await ops.read(info.fh, 0, 100)) == b"still here, and more"
        await ops.release(info.fh)
        assert ino not in ops.fs.ctx.handles.open_files
        with fuse_error(errno.ENOENT):
            await ops.lookup(d, b"kept", ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(ROOT, b"orphans", ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)


def test_directories_links_symlinks_and_renames(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = patch_readdir(monkeypatch, room=7)    # several READDIRs per listing

    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "tree")
        sub = await ops.mkdir(d, b"sub", 0o755, ROOT_CTX)  # type: ignore[arg-type]
        assert (await ops.getattr(d, ROOT_CTX)).st_nlink == 3  # type: ignore[arg-type]
        a = await write_file(ops, d, "a", b"A")
        link = await ops.link(a, sub.st_ino, b"a-link", ROOT_CTX)  # type: ignore[arg-type]
        assert link.st_ino == a and link.st_nlink == 2
        sym = await ops.symlink(d, b"s", b"a", ROOT_CTX)  # type: ignore[arg-type]
        assert await ops.readlink(sym.st_ino, ROOT_CTX) == b"a"  # type: ignore[arg-type]
        fifo = await ops.mknod(d, b"p", stat.S_IFIFO | 0o600, 0, ROOT_CTX)  # type: ignore[arg-type]
        assert stat.S_ISFIFO(fifo.st_mode)
        for i in range(20):
            await write_file(ops, d, f"n{i:02d}", b"")
        names = await listing.list(ops, d)
        assert names[:2] == [".", ".."]
        assert sorted(names[2:]) == sorted(["sub", "a", "s", "p", *(f"n{i:02d}" for i in range(20))])

        with fuse_error(errno.EEXIST):
            await ops.rename(d, b"a", d, b"s", RENAME_NOREPLACE, ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.EINVAL):
            await ops.rename(d, b"a", d, b"s", RENAME_NOREPLACE | RENAME_EXCHANGE, ROOT_CTX)  # type: ignore[arg-type]
        await ops.rename(d, b"a", d, b"s", RENAME_EXCHANGE, ROOT_CTX)  # type: ignore[arg-type]
        assert (await ops.lookup(d, b"s", ROOT_CTX)).st_ino == a  # type: ignore[arg-type]
        assert (await ops.lookup(d, b"a", ROOT_CTX)).st_ino == sym.st_ino  # type: ignore[arg-type]
        await ops.rename(d, b"s", d, b"n00", 0, ROOT_CTX)  # type: ignore[arg-type]   # replaces n00
        assert (await ops.lookup(d, b"n00", ROOT_CTX)).st_ino == a  # type: ignore[arg-type]
        await ops.rename(d, b"sub", ROOT, b"moved-sub", 0, ROOT_CTX)  # type: ignore[arg-type]
        assert (await ops.getattr(d, ROOT_CTX)).st_nlink == 2  # type: ignore[arg-type]
        with fuse_error(errno.ENOTEMPTY):
            await ops.rmdir(ROOT, b"moved-sub", ROOT_CTX)  # type: ignore[arg-type]
        await ops.unlink(sub.st_ino, b"a-link", ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(ROOT, b"moved-sub", ROOT_CTX)  # type: ignore[arg-type]
        assert (await ops.getattr(a, ROOT_CTX)).st_nlink == 1  # type: ignore[arg-type]

    rig.run(scenario)


def test_setattr_rules_and_setuid_clearing(rig: Rig) -> None:
    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "attrs")
        ino = await write_file(ops, d, "f", b"0123456789")
        entry = await ops.getattr(ino, ROOT_CTX)  # type: ignore[arg-type]
        entry.st_mode = stat.S_IFREG | 0o6775
        entry.st_uid = entry.st_gid = 1000
        await ops.setattr(ino, entry, Fields(update_mode=True, update_uid=True, update_gid=True),  # type: ignore[arg-type]
                          None, ROOT_CTX)  # type: ignore[arg-type]
        assert stat.S_IMODE((await ops.getattr(ino, ROOT_CTX)).st_mode) == 0o6775  # type: ignore[arg-type]
        info = await ops.open(ino, os.O_WRONLY, USER)  # type: ignore[arg-type]
        await ops.write(info.fh, 0, b"x")         # an unprivileged write clears setuid and setgid
        await ops.release(info.fh)
        assert stat.S_IMODE((await ops.getattr(ino, ROOT_CTX)).st_mode) == 0o775  # type: ignore[arg-type]
        entry.st_size = 4
        after = await ops.setattr(ino, entry, Fields(update_size=True), None, ROOT_CTX)  # type: ignore[arg-type]
        assert after.st_size == 4 and await read_file(ops, ino, 100) == b"x123"
        entry.st_size = -1
        with fuse_error(errno.EINVAL):
            await ops.setattr(ino, entry, Fields(update_size=True), None, ROOT_CTX)  # type: ignore[arg-type]
        entry.st_mtime_ns = 1_000_000_000
        after = await ops.setattr(ino, entry, Fields(update_mtime=True), None, ROOT_CTX)  # type: ignore[arg-type]
        assert after.st_mtime_ns == 1_000_000_000

    rig.run(scenario)


def test_xattrs_and_bad_names(rig: Rig) -> None:
    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "xattrs")
        ino = await write_file(ops, d, "f", b"")
        await ops.setxattr(ino, b"user.k", b"v", ROOT_CTX)  # type: ignore[arg-type]
        assert await ops.getxattr(ino, b"user.k", ROOT_CTX) == b"v"  # type: ignore[arg-type]
        assert await ops.listxattr(ino, ROOT_CTX) == [b"user.k"]  # type: ignore[arg-type]
        await ops.removexattr(ino, b"user.k", ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.ENODATA):
            await ops.getxattr(ino, b"user.k", ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.EILSEQ):          # names travel as UTF-8
            await ops.lookup(d, b"\xff", ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.ENAMETOOLONG):
            await ops.mkdir(d, b"n" * 256, 0o755, ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.ENOTDIR):
            await ops.mkdir(ino, b"under-a-file", 0o755, ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.EEXIST):
            await ops.mkdir(d, b"f", 0o755, ROOT_CTX)  # type: ignore[arg-type]
        with fuse_error(errno.EBADF):
            await ops.read(987654, 0, 10)

    rig.run(scenario)


def test_fsck_sees_what_it_must_find(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """The check the scenarios end with can fail: a name pointing at a missing inode is found."""
    import sqlite3
    with Cluster(tmp_path / "broken", workers=0) as broken:
        broken.client().fs.mkdir("/d")
        assert fsck(broken) == []
        db = sqlite3.connect(str(broken.root / "master" / "meta.db"))
        with db:
            db.execute("INSERT INTO dentries (parent, name, ino) VALUES (1, 'dangling', 999999)")
        db.close()
        assert any("missing inode 999999" in problem for problem in fsck(broken))


def block_path(cluster: Cluster, block_id: int) -> pathlib.Path:
    name = layout.block_file_name(block_id)
    return cluster.worker_dir(0) / "blocks" / layout.shard_dir(name) / name


@pytest.mark.parametrize("trio_reads", [False, True], ids=["threaded", "trio-reader"])
def test_a_corrupt_block_reads_as_eio_every_time(cluster: Cluster, trio_reads: bool) -> None:
    """Not ESTALE: the inode is fine, its only copy is bad (and dropped by the worker on the first
    read). ESTALE would make the kernel re-resolve the path and retry, then fail the same way."""
    rig = Rig(cluster, trio_reads=trio_reads)
    data = random_bytes(2 * MiB, seed=3)
    name = f"corrupt-{trio_reads}"

    async def scenario(ops: Operations) -> None:
        ino = await write_file(ops, ROOT, name, data)
        block = rig.client.master.get_blocks(ino).blocks[0]
        path = block_path(cluster, block.block_id)
        raw = bytearray(path.read_bytes())
        raw[len(raw) - MiB] ^= 0xFF             # the second chunk of the payload (after the header)
        path.write_bytes(bytes(raw))
        info = await ops.open(ino, os.O_RDONLY, ROOT_CTX)  # type: ignore[arg-type]
        try:
            assert bytes(await ops.read(info.fh, 0, 4096)) == data[:4096], "the good chunk still reads"
            for _ in range(2):
                with fuse_error(errno.EIO):
                    await ops.read(info.fh, MiB, MiB)
        finally:
            await ops.release(info.fh)
        await ops.unlink(ROOT, name.encode(), ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)


def test_a_removed_open_directory_shows_nlink_0_until_releasedir(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = patch_readdir(monkeypatch)

    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "removed-dirs")
        victim = await ops.mkdir(d, b"victim", 0o755, ROOT_CTX)  # type: ignore[arg-type]
        await ops.mkdir(d, b"other", 0o755, ROOT_CTX)  # type: ignore[arg-type]
        fh = await ops.opendir(victim.st_ino, ROOT_CTX)  # type: ignore[arg-type]
        await ops.rename(d, b"other", d, b"victim", 0, ROOT_CTX)  # type: ignore[arg-type]
        ghost = await ops.getattr(victim.st_ino, ROOT_CTX)  # type: ignore[arg-type]
        assert ghost.st_nlink == 0 and stat.S_ISDIR(ghost.st_mode)
        listing.got.clear()
        await ops.readdir(fh, 0, None)  # type: ignore[arg-type]
        assert listing.got == []
        await ops.releasedir(fh)
        with fuse_error(errno.ESTALE):   # gone for good once nothing holds it open
            await ops.getattr(victim.st_ino, ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(d, b"victim", ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(ROOT, b"removed-dirs", ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)


def test_dot_lookups_by_inode(rig: Rig) -> None:
    """What the kernel sends to find an inode it dropped from a file handle (export support:
    LOOKUP of "." in the inode itself, ".." for its parent)."""
    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "dots")
        ino = await write_file(ops, d, "f", b"x")
        assert (await ops.lookup(ino, b".", ROOT_CTX)).st_ino == ino  # type: ignore[arg-type]
        assert (await ops.lookup(d, b".", ROOT_CTX)).st_ino == d  # type: ignore[arg-type]
        assert (await ops.lookup(d, b"..", ROOT_CTX)).st_ino == ROOT  # type: ignore[arg-type]
        await ops.unlink(d, b"f", ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(ROOT, b"dots", ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)


def test_a_batched_atime_update_never_sets_ctime_back(rig: Rig) -> None:
    async def scenario(ops: Operations) -> None:
        d = await fresh_dir(ops, "atime")
        ino = await write_file(ops, d, "f", b"first")
        info = await ops.open(ino, os.O_RDWR, ROOT_CTX)  # type: ignore[arg-type]
        assert bytes(await ops.read(info.fh, 0, 10)) == b"first"     # notes an atime (relatime)
        assert ops.fs.atime.shown(ino) is not None
        await ops.write(info.fh, 0, b"again")
        await ops.flush(info.fh)                                     # the commit moves ctime
        committed = rig.client.master.getattr(ino)
        await ops.fs.atime.flush()
        after = rig.client.master.getattr(ino)
        assert after.ctime_ns >= committed.ctime_ns and after.mtime_ns == committed.mtime_ns
        assert after.atime_ns > 0 and ops.fs.atime.shown(ino) is None
        await ops.release(info.fh)
        await ops.unlink(d, b"f", ROOT_CTX)  # type: ignore[arg-type]
        await ops.rmdir(ROOT, b"atime", ROOT_CTX)  # type: ignore[arg-type]

    rig.run(scenario)
