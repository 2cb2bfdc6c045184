"""The mount process: ready line, clean ends (SIGTERM, fusermount3 -u), stale mountpoints and
--force, --subdir, read-only mounts, bad options, an unreachable master."""
from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import subprocess
import time

import pytest

from curvine_py.fuse import mountpoint
from curvine_py.procs import curvine_command
from tests.fuse.mounts import Mount
from tests.fuse.test_posix import _gone
from tests.harness import Cluster, wait_until


def test_sigterm_commits_open_files_and_unmounts(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    mount = Mount(cluster.master_address, tmp_path / "mnt").start()
    assert mount.process is not None and mount.process.ready == f"mounted={mount.path}"
    fd = os.open(mount.path / "open-at-exit", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"not lost")
    mount.stop()    # SIGTERM: exit code 0, unmounted, no unexpected errors
    with pytest.raises(OSError) as info:
        os.write(fd, b"more")
    assert info.value.errno == errno.ENOTCONN
    with contextlib.suppress(OSError):
        os.close(fd)    # the connection is gone: close reports ENOTCONN
    with cluster.client().fs.open("/open-at-exit") as fh:
        assert fh.read() == b"not lost"


def test_fusermount_u_ends_the_process(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    mount = Mount(cluster.master_address, tmp_path / "mnt").start()
    (mount.path / "f").write_bytes(b"x")
    subprocess.run(["fusermount3", "-u", str(mount.path)], check=True)
    assert mount.process is not None
    assert mount.process.process.wait(timeout=20) == 0
    assert not mountpoint.is_mounted(str(mount.path))
    mount.process = None


def test_stale_mountpoint_is_reported_and_force_recovers_it(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    mount = Mount(cluster.master_address, tmp_path / "mnt").start()
    (mount.path / "kept").write_bytes(b"survives")
    mount.kill()
    try:
        with pytest.raises(OSError) as info:
            os.stat(mount.path)
        assert info.value.errno == errno.ENOTCONN
        started = time.monotonic()
        result = subprocess.run(curvine_command("mount", "--master", cluster.master_address, str(mount.path)),
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 1 and time.monotonic() - started < 20
        assert "stale FUSE mount" in result.stderr and "--force" in result.stderr, result.stderr
        recovered = Mount(cluster.master_address, mount.path, args=["--force"]).start()
        try:
            assert (recovered.path / "kept").read_bytes() == b"survives"
        finally:
            recovered.stop()
    finally:
        if mountpoint.is_mounted(str(mount.path)):
            mountpoint.lazy_unmount(str(mount.path))


def test_a_killed_mount_s_unlinked_open_files_are_released(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """A mount keeps a file unlinked while open as an orphan and frees it at its last close. Killed,
    it never closes: the master notices the silent session (3 s in tests) and releases the orphan,
    which then goes through the unlink grace (3 s in tests) and is freed."""
    live = Mount(cluster.master_address, tmp_path / "live").start()
    doomed = Mount(cluster.master_address, tmp_path / "doomed").start()
    try:
        client = cluster.client()
        held = []
        for name, mount in (("held-by-live", live), ("held-by-doomed", doomed)):
            path = mount.path / name
            path.write_bytes(b"x" * 1000)
            fd = os.open(path, os.O_RDONLY)
            held.append((fd, os.fstat(fd).st_ino))
            os.unlink(path)
        doomed.kill()
        wait_until(lambda: _gone(client, held[1][1]), 15, "the killed mount's orphan freed")
        assert os.pread(held[0][0], 10, 0) == b"x" * 10, "the live mount's orphan is kept"
        assert client.master.getattr(held[0][1]).nlink == 0
    finally:
        for fd, _ in held:
            with contextlib.suppress(OSError):
                os.close(fd)
        live.stop()
        if mountpoint.is_mounted(str(doomed.path)):
            mountpoint.lazy_unmount(str(doomed.path))


def test_a_live_mount_is_not_mounted_over_without_force(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with Mount(cluster.master_address, tmp_path / "mnt") as mount:
        result = subprocess.run(curvine_command("mount", "--master", cluster.master_address, str(mount.path)),
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 1 and "already a mount point" in result.stderr
        (mount.path / "still-served").write_bytes(b"yes")
        assert (mount.path / "still-served").read_bytes() == b"yes"


def test_subdir_mount_shows_only_that_directory(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    client = cluster.client()
    client.fs.mkdir("/volumes/pvc-1", parents=True)
    client.fs.mkdir("/volumes/pvc-2", parents=True)
    with Mount(cluster.master_address, tmp_path / "mnt", args=["--subdir", "/volumes/pvc-1"]) as mount:
        assert os.listdir(mount.path) == []
        (mount.path / "d").mkdir()
        (mount.path / "d" / "f").write_bytes(b"in pvc-1")
        assert os.stat(mount.path).st_ino == 1
        assert os.stat(mount.path / "d" / "..").st_ino == 1
        assert sorted(os.listdir(mount.path)) == ["d"]
        assert (mount.path / ".." / mount.path.name).exists()   # '..' of the mount is the host's
    with client.fs.open("/volumes/pvc-1/d/f") as fh:
        assert fh.read() == b"in pvc-1"
    assert client.fs.ls("/volumes/pvc-2") == []


def test_read_only_mount(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    client = cluster.client()
    with client.fs.open("/present", "wb") as fh:
        fh.write(b"readable")
    with Mount(cluster.master_address, tmp_path / "mnt", args=["-o", "ro"]) as mount:
        assert (mount.path / "present").read_bytes() == b"readable"
        for action in (lambda: (mount.path / "new").write_bytes(b""),
                       lambda: os.open(mount.path / "present", os.O_RDWR),
                       lambda: (mount.path / "dir").mkdir(),
                       lambda: os.unlink(mount.path / "present")):
            with pytest.raises(OSError) as info:
                action()
            assert info.value.errno == errno.EROFS


def test_bad_options_and_an_unreachable_master(tmp_path: pathlib.Path) -> None:
    (tmp_path / "mnt").mkdir()
    bad = subprocess.run(curvine_command("mount", "--master", "127.0.0.1:1", str(tmp_path / "mnt"),
                                         "-o", "bogus_option"), capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode == 2 and "unknown mount option 'bogus_option'" in bad.stderr
    started = time.monotonic()
    down = subprocess.run(curvine_command("mount", "--master", "127.0.0.1:1", str(tmp_path / "mnt"),
                                          "--deadline", "2"), capture_output=True, text=True, timeout=60,
                          check=False)
    assert down.returncode == 1 and time.monotonic() - started < 20
    assert "curvine-py mount:" in down.stderr and not mountpoint.is_mounted(str(tmp_path / "mnt"))


def test_timeouts_and_writeback_options_mount(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    args = ["-o", "attr_timeout=0,entry_timeout=0", "--writeback-cache"]
    with Mount(cluster.master_address, tmp_path / "mnt", args=args) as mount:
        with open(mount.path / "f", "wb", buffering=0) as fh:
            fh.writelines(b"x" * 4096 for _ in range(100))    # 100 small writes
        assert os.stat(mount.path / "f").st_size == 409600
        client = cluster.client()
        wait_until(lambda: client.fs.stat("/f").size == 409600, 10, "size committed at close")


@pytest.mark.parametrize(("options", "source", "fstype"), [
    ([], None, "fuse.curvine"),
    (["-o", "subtype=,fsname=plainfs"], "plainfs", "fuse"),
    (["-o", "fsname=first", "-o", "fsname=kvstore,subtype=cv"], "kvstore", "fuse.cv"),
])
def test_fsname_and_subtype_options_are_honoured(cluster: Cluster, tmp_path: pathlib.Path,
                                                 options: list[str], source: str | None, fstype: str) -> None:
    """`-o subtype=` (empty) gives a plain `fuse` mount type, as harnesses matching the type need."""
    with Mount(cluster.master_address, tmp_path / "mnt", args=options) as mount:
        fields = next(line.split() for line in pathlib.Path("/proc/self/mounts").read_text().splitlines()
                      if line.split()[1] == str(mount.path))
        assert fields[2] == fstype
        assert fields[0] == (source if source is not None else "curvine:/")
