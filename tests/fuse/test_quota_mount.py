"""A mount rooted at a quota'd directory (`mount --subdir`, what the CSI node stages): statfs shows
the quota as the size and inode count (as JuiceFS does), and writes and creates past it fail with
EDQUOT through the kernel, leaving the committed bytes."""
from __future__ import annotations

import errno
import os
import pathlib

import pytest

from tests.fuse.mounts import Mount
from tests.harness import Cluster

MiB = 1 << 20


def test_subdir_mount_of_a_quota_directory(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    client = cluster.client()
    client.fs.mkdir("/volumes/pvc-q", parents=True)
    client.fs.set_quota("/volumes/pvc-q", max_bytes=4 * MiB, max_inodes=3)
    with Mount(cluster.master_address, tmp_path / "mnt", args=["--subdir", "/volumes/pvc-q"]) as mount:
        st = os.statvfs(mount.path)
        assert st.f_blocks * st.f_frsize == 4 * MiB
        assert st.f_bavail * st.f_frsize == 4 * MiB
        assert (st.f_files, st.f_ffree) == (3, 3)
        (mount.path / "a").write_bytes(b"x" * (3 * MiB))
        st = os.statvfs(mount.path)
        assert st.f_bavail * st.f_frsize == MiB
        assert (st.f_files, st.f_ffree) == (3, 2)
        with pytest.raises(OSError) as raised, open(mount.path / "a", "ab") as f:
            f.write(b"y" * (2 * MiB))
        assert raised.value.errno == errno.EDQUOT
        assert client.fs.stat("/volumes/pvc-q/a").size == 3 * MiB     # the committed bytes stay
        (mount.path / "d").mkdir()
        (mount.path / "d" / "b").write_bytes(b"")
        with pytest.raises(OSError) as raised:
            (mount.path / "c").write_bytes(b"")
        assert raised.value.errno == errno.EDQUOT
        assert sorted(os.listdir(mount.path)) == ["a", "d"]
    # the whole namespace is not bounded by it
    assert client.fs.df("/").capacity > 4 * MiB
