"""POSIX behaviour of the mount, case by case, through the kernel (real mount, as root; the
permission cases run as uid 1000/1001 via setpriv). Expected values are Linux's (tmpfs)."""
from __future__ import annotations

import ctypes
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

from tests.fuse.mounts import Mount, run_as
from tests.harness import Cluster, random_bytes, wait_until

MiB = 1 << 20
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def renameat2(src: pathlib.Path, dst: pathlib.Path, flags: int) -> None:
    result = libc.renameat2(AT_FDCWD, bytes(src), AT_FDCWD, bytes(dst), flags)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def raw_fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def errno_of(fn: object, *args: object) -> int:
    try:
        fn(*args)  # type: ignore[operator]
    except OSError as exc:
        return exc.errno or 0
    return 0


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


# -- permissions as non-root users -----------------------------------------------------------------
def test_permission_checks_for_a_non_root_user(d: pathlib.Path) -> None:
    (d / "rootfile").write_bytes(b"secret")
    os.chmod(d / "rootfile", 0o644)
    (d / "private").mkdir(mode=0o700)
    (d / "closed").mkdir(mode=0o755)
    code = r"""
import errno, os, sys
d = sys.argv[1]
def err(fn, *a):
    try:
        fn(*a)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"
print(err(lambda: open(d + "/rootfile").read()))
print(err(lambda: open(d + "/rootfile", "a").write("x")))
print(err(os.chmod, d + "/rootfile", 0o777))
print(err(os.chown, d + "/rootfile", 1000, 1000))
print(err(os.listdir, d + "/private"))
print(err(os.mkdir, d + "/closed/sub"))
fd = os.open(d + "/mine", os.O_CREAT | os.O_WRONLY, 0o600)
os.close(fd)
st = os.stat(d + "/mine")
print(st.st_uid, st.st_gid, oct(st.st_mode & 0o7777))
print(err(os.chmod, d + "/mine", 0o640))
print(err(os.utime, d + "/rootfile", (1, 1)))
print(err(os.utime, d + "/rootfile", None))
"""
    result = run_as(1000, 1000, code, str(d))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[:6] == ["ok", "EACCES", "EPERM", "EPERM", "EACCES", "EACCES"], lines
    assert lines[6] == "1000 1000 0o600"
    assert lines[7:10] == ["ok", "EPERM", "EACCES"], lines


def test_sticky_directory_protects_other_users_files(d: pathlib.Path) -> None:
    sticky = d / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    create = "import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o666))"
    assert run_as(1001, 1001, create, str(sticky / "theirs")).returncode == 0
    remove = ("import errno, os, sys\ntry:\n    os.unlink(sys.argv[1]); print('ok')\n"
              "except OSError as e:\n    print(errno.errorcode[e.errno])")
    assert run_as(1000, 1000, remove, str(sticky / "theirs")).stdout.strip() == "EPERM"
    assert run_as(1001, 1001, remove, str(sticky / "theirs")).stdout.strip() == "ok"


def test_setuid_and_setgid_cleared_by_unprivileged_write_and_truncate(d: pathlib.Path) -> None:
    path = d / "suid"
    path.write_bytes(b"abc")
    os.chmod(path, 0o6777)
    write = "import sys; f = open(sys.argv[1], 'r+b'); f.write(b'X'); f.close()"
    result = run_as(1000, 1000, write, str(path))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777
    assert path.read_bytes() == b"Xbc"
    os.chmod(path, 0o6777)
    result = run_as(1000, 1000, "import os, sys; os.truncate(sys.argv[1], 1)", str(path))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777
    os.chmod(path, 0o6777)
    with open(path, "r+b") as fh:      # root (CAP_FSETID) keeps the bits
        fh.write(b"Y")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o6777
    os.chmod(path, 0o2767)             # setgid without group-execute stays (mandatory-locking marker)
    assert run_as(1000, 1000, write, str(path)).returncode == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o2767


def test_setgid_directory_passes_its_group_on(d: pathlib.Path) -> None:
    group_dir = d / "g"
    group_dir.mkdir()
    os.chown(group_dir, 0, 1234)
    os.chmod(group_dir, 0o2775)
    (group_dir / "f").write_bytes(b"")
    (group_dir / "sub").mkdir()
    assert os.stat(group_dir / "f").st_gid == 1234
    sub = os.stat(group_dir / "sub")
    assert sub.st_gid == 1234 and sub.st_mode & stat.S_ISGID


def _acl(*entries: tuple[int, int, int]) -> bytes:
    """A POSIX ACL in the kernel's xattr format (what setfacl writes): version 2, then
    (tag, perm, id) entries."""
    import struct
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


USER_OBJ, USER, GROUP_OBJ, MASK, OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF


def test_posix_acls_are_refused_not_silently_ignored(d: pathlib.Path) -> None:
    """docs/fuse.md "ACLs": an ACL the mount would store but never apply is a security defect,
    so setting one fails with EOPNOTSUPP (setfacl reports "Operation not supported") and the
    mode stays what it was; reading one says the same (getfacl falls back to the mode)."""
    path = d / "f"
    path.write_bytes(b"x")
    path.chmod(0o640)
    grant = _acl((USER_OBJ, 7, UNDEFINED_ID), (USER, 7, 1234), (GROUP_OBJ, 4, UNDEFINED_ID),
                 (MASK, 7, UNDEFINED_ID), (OTHER, 0, UNDEFINED_ID))
    assert errno_of(os.setxattr, path, "system.posix_acl_access", grant) == errno.EOPNOTSUPP
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert errno_of(os.getxattr, path, "system.posix_acl_access") in (errno.EOPNOTSUPP, errno.ENODATA)
    assert errno_of(os.setxattr, d, "system.posix_acl_default", grant) == errno.EOPNOTSUPP
    sub = d / "sub"
    sub.mkdir(0o750)
    assert stat.S_IMODE(sub.stat().st_mode) == 0o750 & ~_umask(), "no default ACL was inherited"
    assert not [n for n in os.listxattr(path) if n.startswith("system.posix_acl")]
    # The user who was to be granted rwx by the refused ACL still gets nothing from the mode.
    denied = run_as(1234, 1234, "import sys; open(sys.argv[1]).read()", str(path))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied.stderr


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read(path: pathlib.Path) -> bytes:
    with open(path, "rb") as fh:     # an open whose read must move the atime drops the page cache: the read arrives
        return fh.read()


def test_relatime_moves_atime_on_the_first_read_after_a_change(d: pathlib.Path, shared_cluster: Cluster,
                                                               shared_mount: Mount) -> None:
    path = d / "f"
    path.write_bytes(b"data")
    before = path.stat()
    assert before.st_atime_ns <= before.st_mtime_ns
    time.sleep(0.01)                     # so the new atime is visibly later on this clock
    _read(path)
    first = path.stat()
    assert first.st_atime_ns > before.st_atime_ns, "the first read after a write moves atime"
    assert first.st_ctime_ns == before.st_ctime_ns and first.st_mtime_ns == before.st_mtime_ns
    _read(path)
    assert path.stat().st_atime_ns == first.st_atime_ns, "relatime: not again until the next change"
    client = shared_cluster.client()
    relative = "/" + str(path.relative_to(shared_mount.path))   # the shared mount shows the namespace root
    wait_until(lambda: client.fs.stat(relative).atime_ns == first.st_atime_ns, 10,
               "the batched atime update reaches the master")
    assert client.fs.stat(relative).ctime_ns == before.st_ctime_ns, "an atime update keeps ctime"


@pytest.mark.parametrize("option", ["noatime", "strictatime"])
def test_noatime_and_strictatime(shared_cluster: Cluster, tmp_path: pathlib.Path, option: str) -> None:
    import tempfile
    where = pathlib.Path(tempfile.mkdtemp(prefix="curvine-mnt-"))
    try:
        with Mount(shared_cluster.master_address, where, args=["-o", option]) as mount:
            path = mount.path / f"atime-{option}"
            path.write_bytes(b"data")
            _read(path)
            first = path.stat()
            time.sleep(0.01)
            _read(path)
            second = path.stat()
            if option == "noatime":
                assert second.st_atime_ns == first.st_atime_ns <= first.st_mtime_ns
            else:
                assert second.st_atime_ns > first.st_atime_ns > first.st_mtime_ns, "every read moves it"
            path.unlink()
    finally:
        where.rmdir()


def test_fstat_of_an_open_directory_removed_or_replaced_shows_nlink_0(d: pathlib.Path) -> None:
    """generic/035: a directory removed while open (replaced by rename(2), or rmdir) stays
    fstat-able with nlink 0 until its last close, as on a local file system; not ESTALE."""
    (d / "victim").mkdir()
    (d / "other").mkdir()
    (d / "gone").mkdir()
    replaced = os.open(d / "victim", os.O_RDONLY | os.O_DIRECTORY)
    removed = os.open(d / "gone", os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = os.fstat(replaced)
        os.rename(d / "other", d / "victim")
        os.rmdir(d / "gone")
        for fd in (replaced, removed):
            st = os.fstat(fd)
            assert st.st_nlink == 0 and stat.S_ISDIR(st.st_mode)
            assert os.listdir(fd) == []
        assert os.fstat(replaced).st_ino == before.st_ino
        assert os.stat(d / "victim").st_ino != before.st_ino and os.stat(d / "victim").st_nlink == 2
    finally:
        os.close(replaced)
        os.close(removed)
    assert sorted(os.listdir(d)) == ["victim"]


def test_open_by_handle_after_the_kernel_dropped_the_inode(d: pathlib.Path, shared_mount: Mount) -> None:
    """generic/426: name_to_handle_at, then the kernel forgets the inode (drop_caches), then
    open_by_handle_at finds it again by a LOOKUP of "." in its inode number (export support)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class Handle(ctypes.Structure):
        _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                    ("f_handle", ctypes.c_ubyte * 128)]

    path = d / "by-handle"
    path.write_bytes(b"found again")
    handle, mount_id = Handle(handle_bytes=128), ctypes.c_int()
    if libc.name_to_handle_at(-100, str(path).encode(), ctypes.byref(handle), ctypes.byref(mount_id), 0) != 0:
        raise OSError(ctypes.get_errno(), "name_to_handle_at")
    mount_fd = os.open(shared_mount.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("2")     # unused dentries and inodes
        fd = libc.open_by_handle_at(mount_fd, ctypes.byref(handle), os.O_RDONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open_by_handle_at")
        try:
            assert os.read(fd, 100) == b"found again"
        finally:
            os.close(fd)
        path.unlink()
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("2")
        fd = libc.open_by_handle_at(mount_fd, ctypes.byref(handle), os.O_RDONLY)
        assert fd < 0 and ctypes.get_errno() == errno.ESTALE, "a removed file's handle is stale"
    finally:
        os.close(mount_fd)
