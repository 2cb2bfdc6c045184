"""POSIX behaviour of the mount as non-root users (uid 1000/1001 via setpriv), ACLs, atime, open
directories and handles, through the kernel (real mount). Expected values are Linux's (tmpfs)."""
from __future__ import annotations

import ctypes
import errno
import os
import pathlib
import stat
import time

import pytest

from tests.fuse.mounts import Mount, run_as
from tests.fuse.posixlib import (
    errno_of,
)
from tests.harness import Cluster, wait_until


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
