"""POSIX behaviour of the mount, case by case, through the kernel (real mount, as root). Expected
values are Linux's (tmpfs). Permissions, ACLs, atime and open directories: test_posix_access.py."""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import pathlib
import stat
import subprocess
import sys
import time

import pytest

from tests.fuse.mounts import Mount
from tests.fuse.posixlib import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    MiB,
    errno_of,
    raw_fallocate,
    renameat2,
)
from tests.harness import Cluster, random_bytes, wait_until


# -- regular files ---------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 4095, MiB + 3, 3 * MiB])
def test_write_then_read_back(d: pathlib.Path, size: int) -> None:
    data = random_bytes(size, seed=size)
    (d / "f").write_bytes(data)
    assert os.stat(d / "f").st_size == size
    assert (d / "f").read_bytes() == data


def test_pwrite_beyond_end_leaves_a_hole_of_zeros(d: pathlib.Path) -> None:
    fd = os.open(d / "f", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"tail", 3 * MiB + 5)
        assert os.fstat(fd).st_size == 3 * MiB + 9
        assert os.pread(fd, 16, MiB) == bytes(16)
    finally:
        os.close(fd)
    data = (d / "f").read_bytes()
    assert data[:3 * MiB + 5] == bytes(3 * MiB + 5) and data[-4:] == b"tail"


def test_descriptors_of_one_mount_see_each_others_writes_before_close(d: pathlib.Path) -> None:
    a = os.open(d / "f", os.O_CREAT | os.O_RDWR, 0o644)
    b = os.open(d / "f", os.O_RDWR)
    try:
        os.pwrite(a, b"hello", 0)
        assert os.pread(b, 5, 0) == b"hello"
        os.pwrite(b, b"J", 0)
        assert os.pread(a, 5, 0) == b"Jello"
        assert os.stat(d / "f").st_size == 5, "stat by name sees the uncommitted size"
    finally:
        os.close(a)
        os.close(b)


def test_o_append_writes_at_the_end(d: pathlib.Path) -> None:
    (d / "f").write_bytes(b"abc")
    fd = os.open(d / "f", os.O_WRONLY | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"def")
        os.write(fd, b"gh")
    finally:
        os.close(fd)
    assert (d / "f").read_bytes() == b"abcdefgh"


def test_o_excl_fails_on_an_existing_name(d: pathlib.Path) -> None:
    os.close(os.open(d / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    assert errno_of(os.open, d / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600) == errno.EEXIST
    (d / "dir").mkdir()
    assert errno_of(os.open, d / "dir", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600) == errno.EEXIST
    assert stat.S_IMODE(os.stat(d / "f").st_mode) == 0o600


def test_o_trunc_empties_the_file_and_updates_mtime(d: pathlib.Path) -> None:
    (d / "f").write_bytes(b"x" * 10000)
    before = os.stat(d / "f")
    time.sleep(0.01)
    os.close(os.open(d / "f", os.O_WRONLY | os.O_TRUNC))
    after = os.stat(d / "f")
    assert after.st_size == 0 and (d / "f").read_bytes() == b""
    assert after.st_mtime_ns > before.st_mtime_ns and after.st_ctime_ns > before.st_ctime_ns


def test_truncate_is_sparse_and_reads_zeros(d: pathlib.Path, shared_cluster: Cluster) -> None:
    path = d / "huge"
    path.write_bytes(b"head")
    os.truncate(path, 1 << 50)      # 1 PiB: no bytes are allocated
    assert os.stat(path).st_size == 1 << 50
    with open(path, "rb") as fh:
        fh.seek((1 << 50) - 4096)
        assert fh.read() == bytes(4096)
        fh.seek(0)
        assert fh.read(8) == b"head" + bytes(4)
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, 2)
        assert os.pread(fd, 10, 0) == b"he"
        os.ftruncate(fd, 6)
        assert os.pread(fd, 10, 0) == b"he\0\0\0\0", "shrink then grow exposes zeros, not old bytes"
    finally:
        os.close(fd)
    assert os.stat(path).st_size == 6
    client = shared_cluster.client()
    assert client.master.statfs().used < 1 << 40


def test_fsync_publishes_without_close(d: pathlib.Path, shared_cluster: Cluster, shared_mount: Mount) -> None:
    fd = os.open(d / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"durable")
        os.fsync(fd)
        client = shared_cluster.client()
        remote = "/" + str((d / "f").relative_to(shared_mount.path))
        with client.fs.open(remote) as fh:
            assert fh.read() == b"durable"
    finally:
        os.close(fd)


def test_unlinked_open_file_lives_until_last_close(d: pathlib.Path, shared_cluster: Cluster) -> None:
    path = d / "f"
    path.write_bytes(b"still here")
    fd = os.open(path, os.O_RDWR)
    ino = os.fstat(fd).st_ino
    try:
        os.unlink(path)
        assert not path.exists()
        assert os.fstat(fd).st_nlink == 0
        assert os.pread(fd, 100, 0) == b"still here"
        os.pwrite(fd, b"S", 0)
        os.fsync(fd)
        assert os.pread(fd, 100, 0) == b"Still here"
    finally:
        os.close(fd)
    client = shared_cluster.client()
    wait_until(lambda: _gone(client, ino), 10, f"inode {ino} freed after the last close and the grace")


def test_file_replaced_by_rename_while_open_lives_until_last_close(d: pathlib.Path,
                                                                   shared_cluster: Cluster) -> None:
    """LMCache's pattern (write x.tmp, os.replace over x) while a reader of this mount has x open:
    the reader keeps reading the old content, and the old file is freed at its last close."""
    path = d / "x"
    path.write_bytes(b"old content" * 1000)
    fd = os.open(path, os.O_RDONLY)
    ino = os.fstat(fd).st_ino
    try:
        (d / "x.tmp").write_bytes(b"new")
        os.replace(d / "x.tmp", path)
        assert path.read_bytes() == b"new"
        assert os.pread(fd, 11, 5500) == b"old content"[5500 % 11:] + b"old content"[:5500 % 11]
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    client = shared_cluster.client()
    wait_until(lambda: _gone(client, ino), 10, f"inode {ino} freed after the last close and the grace")


def _gone(client: object, ino: int) -> bool:
    from curvine_py.core.errors import NotFound
    try:
        client.master.getattr(ino)  # type: ignore[attr-defined]
    except NotFound:
        return True
    return False


def test_mmap_shared_writes_reach_the_file(d: pathlib.Path) -> None:
    path = d / "f"
    path.write_bytes(bytes(3 * 4096))
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as m:
        m[4096:4101] = b"hello"
        m.flush()
    assert path.read_bytes()[4096:4101] == b"hello"
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert m[4096:4101] == b"hello"


def test_posix_fallocate_extends_and_other_modes_are_refused(d: pathlib.Path) -> None:
    fd = os.open(d / "f", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, b"abc")
        os.posix_fallocate(fd, 0, 2 * MiB)   # glibc emulates it when fallocate(2) says EOPNOTSUPP
        assert os.fstat(fd).st_size == 2 * MiB
        assert os.pread(fd, 5, 0) == b"abc\0\0"
        punch_hole_keep_size = 0x02 | 0x01
        assert errno_of(raw_fallocate, fd, punch_hole_keep_size, 0, 4096) == errno.EOPNOTSUPP
    finally:
        os.close(fd)


# -- directories, links, rename ---------------------------------------------------------------------
def test_directories_nlink_and_rmdir(d: pathlib.Path) -> None:
    (d / "a").mkdir()
    (d / "a" / "b").mkdir()
    (d / "a" / "f").write_bytes(b"")
    assert os.stat(d / "a").st_nlink == 3
    assert errno_of(os.rmdir, d / "a") == errno.ENOTEMPTY
    assert errno_of(os.rmdir, d / "a" / "f") == errno.ENOTDIR
    assert errno_of(os.unlink, d / "a" / "b") == errno.EISDIR
    assert errno_of(os.mkdir, d / "a") == errno.EEXIST
    os.rmdir(d / "a" / "b")
    assert os.stat(d / "a").st_nlink == 2
    os.unlink(d / "a" / "f")
    os.rmdir(d / "a")
    assert not (d / "a").exists()


def test_listing_of_a_large_directory_is_complete(d: pathlib.Path) -> None:
    names = {f"entry-{i:05d}-{'x' * (i % 50)}" for i in range(1500)}
    for name in names:
        os.close(os.open(d / name, os.O_CREAT | os.O_WRONLY, 0o644))
    assert set(os.listdir(d)) == names
    listed = subprocess.run(["ls", "-a", str(d)], capture_output=True, text=True, check=True).stdout.split()
    assert listed[:2] == [".", ".."] and set(listed[2:]) == names
    with os.scandir(d) as it:
        kinds = {entry.name: entry.is_file() for entry in it}
    assert all(kinds.values()) and len(kinds) == 1500


def test_symlinks(d: pathlib.Path) -> None:
    (d / "target").write_bytes(b"data")
    os.symlink("target", d / "rel")
    os.symlink(str(d / "target"), d / "abs")
    os.symlink("nowhere", d / "dangling")
    assert os.readlink(d / "rel") == "target"
    assert (d / "rel").read_bytes() == b"data" and (d / "abs").read_bytes() == b"data"
    assert stat.S_ISLNK(os.lstat(d / "rel").st_mode) and os.lstat(d / "rel").st_size == len("target")
    assert not (d / "dangling").exists() and os.path.lexists(d / "dangling")
    (d / "sub").mkdir()
    os.symlink("sub", d / "dirlink")
    (d / "dirlink" / "inside").write_bytes(b"x")
    assert (d / "sub" / "inside").read_bytes() == b"x"
    long_target = "t" * 4000
    os.symlink(long_target, d / "long")
    assert os.readlink(d / "long") == long_target


def test_hard_links_share_the_inode(d: pathlib.Path) -> None:
    (d / "a").write_bytes(b"shared")
    os.link(d / "a", d / "b")
    sa, sb = os.stat(d / "a"), os.stat(d / "b")
    assert sa.st_ino == sb.st_ino and sa.st_nlink == 2
    (d / "b").write_bytes(b"changed")
    assert (d / "a").read_bytes() == b"changed"
    os.unlink(d / "a")
    assert os.stat(d / "b").st_nlink == 1 and (d / "b").read_bytes() == b"changed"
    (d / "dir").mkdir()
    assert errno_of(os.link, d / "dir", d / "dirlink") == errno.EPERM
    assert errno_of(os.link, d / "b", d / "b") == errno.EEXIST


def test_rename_cases(d: pathlib.Path) -> None:
    (d / "x").mkdir()
    (d / "y").mkdir()
    (d / "x" / "f").write_bytes(b"one")
    os.rename(d / "x" / "f", d / "y" / "g")
    assert (d / "y" / "g").read_bytes() == b"one" and not (d / "x" / "f").exists()
    (d / "y" / "h").write_bytes(b"two")
    os.rename(d / "y" / "h", d / "y" / "g")        # replaces atomically
    assert (d / "y" / "g").read_bytes() == b"two" and not (d / "y" / "h").exists()
    (d / "empty").mkdir()
    os.rename(d / "x", d / "empty")                # a directory over an empty directory
    assert (d / "empty").is_dir() and not (d / "x").exists()
    (d / "empty" / "keep").write_bytes(b"")
    assert errno_of(os.rename, d / "y", d / "empty") == errno.ENOTEMPTY
    assert errno_of(os.rename, d / "y", d / "y" / "inside") == errno.EINVAL
    assert errno_of(os.rename, d / "y" / "g", d / "empty") == errno.EISDIR
    assert errno_of(os.rename, d / "empty", d / "y" / "g") == errno.ENOTDIR
    assert errno_of(os.rename, d / "missing", d / "z") == errno.ENOENT
    assert os.stat(d / "y").st_nlink == 2 and os.stat(d / "empty").st_nlink == 2


def test_rename_noreplace_and_exchange(d: pathlib.Path) -> None:
    (d / "a").write_bytes(b"A")
    (d / "b").write_bytes(b"B")
    (d / "dir").mkdir()
    (d / "dir" / "inner").write_bytes(b"I")
    assert errno_of(renameat2, d / "a", d / "b", RENAME_NOREPLACE) == errno.EEXIST
    renameat2(d / "a", d / "c", RENAME_NOREPLACE)
    assert (d / "c").read_bytes() == b"A" and not (d / "a").exists()
    renameat2(d / "c", d / "b", RENAME_EXCHANGE)
    assert (d / "c").read_bytes() == b"B" and (d / "b").read_bytes() == b"A"
    renameat2(d / "b", d / "dir", RENAME_EXCHANGE)   # a file and a directory trade places
    assert (d / "b" / "inner").read_bytes() == b"I" and (d / "dir").read_bytes() == b"A"
    assert errno_of(renameat2, d / "c", d / "nothing", RENAME_EXCHANGE) == errno.ENOENT


def test_names_up_to_255_bytes_and_long_paths(d: pathlib.Path) -> None:
    longest = "n" * 255
    (d / longest).write_bytes(b"ok")
    assert (d / longest).read_bytes() == b"ok"
    assert errno_of(os.open, d / ("n" * 256), os.O_CREAT | os.O_WRONLY, 0o644) == errno.ENAMETOOLONG
    utf8 = "é" * 127    # 254 bytes
    (d / utf8).mkdir()
    assert utf8 in os.listdir(d)
    deep = d
    while len(str(deep).encode()) + 201 + len("/leaf") < 4095:   # PATH_MAX counts the NUL
        deep = deep / ("p" * 200)
        deep.mkdir()
    (deep / "leaf").write_bytes(b"deep")
    assert len(str(deep / "leaf").encode()) > 3800 and (deep / "leaf").read_bytes() == b"deep"
    assert errno_of(os.stat, str(deep / ("q" * 255) / "x")) == errno.ENAMETOOLONG


def test_mkfifo_and_mknod(d: pathlib.Path) -> None:
    os.mkfifo(d / "fifo", 0o640)
    st = os.stat(d / "fifo")
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    os.mknod(d / "chr", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    st = os.stat(d / "chr")
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3
    os.mknod(d / "reg", 0o644 | stat.S_IFREG)
    assert stat.S_ISREG(os.stat(d / "reg").st_mode)
    # a FIFO on the mount works between two processes (the kernel serves it, not the daemon)
    reader = subprocess.Popen([sys.executable, "-c", f"print(open({str(d / 'fifo')!r}).read())"],
                              stdout=subprocess.PIPE, text=True)
    with open(d / "fifo", "w") as fh:
        fh.write("through the fifo")
    assert reader.communicate(timeout=30)[0].strip() == "through the fifo"


# -- attributes and times ---------------------------------------------------------------------------
def test_chmod_chown_and_ctime(d: pathlib.Path) -> None:
    path = d / "f"
    path.write_bytes(b"x")
    before = os.stat(path)
    time.sleep(0.01)
    os.chmod(path, 0o4751)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o4751
    assert st.st_ctime_ns > before.st_ctime_ns and st.st_mtime_ns == before.st_mtime_ns
    os.chown(path, 1000, 1001)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (1000, 1001)
    assert stat.S_IMODE(st.st_mode) == 0o751, "chown clears setuid (Linux, even for root)"
    os.chown(path, -1, -1)
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == (1000, 1001)


def test_utimensat_sets_exact_times_and_now(d: pathlib.Path) -> None:
    path = d / "f"
    path.write_bytes(b"x")
    os.utime(path, ns=(1_000_000_123, 2_000_000_456))
    st = os.stat(path)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_123, 2_000_000_456)
    now = time.time_ns()
    os.utime(path)
    st = os.stat(path)
    assert abs(st.st_mtime_ns - now) < 5e9 and abs(st.st_atime_ns - now) < 5e9
    os.utime(path, ns=(3_000_000_000, 4_000_000_000), follow_symlinks=True)
    assert os.stat(path).st_mtime_ns == 4_000_000_000


def test_write_updates_mtime_and_ctime_and_explicit_mtime_survives_close(d: pathlib.Path) -> None:
    path = d / "f"
    path.write_bytes(b"x")
    before = os.stat(path)
    time.sleep(0.01)
    with open(path, "r+b") as fh:
        fh.write(b"y")
    after = os.stat(path)
    assert after.st_mtime_ns > before.st_mtime_ns and after.st_ctime_ns > before.st_ctime_ns
    fd = os.open(path, os.O_WRONLY)    # cp -p: write, then set times, then close
    try:
        os.write(fd, b"zz")
        os.utime(fd, ns=(5_000_000_000, 6_000_000_000))
    finally:
        os.close(fd)
    assert os.stat(path).st_mtime_ns == 6_000_000_000 and path.read_bytes() == b"zz"


def test_xattrs(d: pathlib.Path) -> None:
    path = d / "f"
    path.write_bytes(b"")
    os.setxattr(path, "user.color", b"blue")
    os.setxattr(path, "user.big", b"v" * 65536)
    assert os.getxattr(path, "user.color") == b"blue"
    assert len(os.getxattr(path, "user.big")) == 65536
    assert sorted(os.listxattr(path)) == ["user.big", "user.color"]
    assert errno_of(os.setxattr, path, "user.color", b"red", os.XATTR_CREATE) == errno.EEXIST
    assert errno_of(os.setxattr, path, "user.none", b"x", os.XATTR_REPLACE) == errno.ENODATA
    os.setxattr(path, "user.color", b"red", os.XATTR_REPLACE)
    assert os.getxattr(path, "user.color") == b"red"
    os.removexattr(path, "user.color")
    assert errno_of(os.getxattr, path, "user.color") == errno.ENODATA
    assert errno_of(os.removexattr, path, "user.color") == errno.ENODATA
    (d / "dir").mkdir()
    os.setxattr(d / "dir", "user.k", b"")
    assert os.getxattr(d / "dir", "user.k") == b""


def test_statfs_reports_the_cluster(d: pathlib.Path, shared_cluster: Cluster) -> None:
    vfs = os.statvfs(d)
    reply = shared_cluster.client().master.statfs()
    assert vfs.f_namemax == 255
    assert vfs.f_blocks * vfs.f_frsize == reply.capacity - reply.capacity % vfs.f_frsize
    assert vfs.f_bavail > 0 and vfs.f_files > 0


# -- locks ------------------------------------------------------------------------------------------
LOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    if sys.argv[2] == "flock":
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
    print("locked")
except OSError as exc:
    print("busy" if exc.errno in (11, 13) else exc.errno)
"""


@pytest.mark.parametrize("kind", ["flock", "fcntl"])
def test_advisory_locks_exclude_other_processes(d: pathlib.Path, kind: str) -> None:
    path = d / "lock"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDWR)

    def probe() -> str:
        return subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path), kind], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
    try:
        if kind == "flock":
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        assert probe() == "busy"
        if kind == "flock":
            fcntl.flock(fd, fcntl.LOCK_UN)
        else:
            fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
        assert probe() == "locked"
    finally:
        os.close(fd)
