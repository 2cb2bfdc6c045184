"""fallocate through a real mount (docs/fuse.md "fallocate").

pyfuse3 has no fallocate handler, so libfuse answers FUSE_FALLOCATE with ENOSYS; the kernel then
answers EOPNOTSUPP itself for every later fallocate(2) on the mount. What each caller gets:
- fallocate(2), every mode (0, KEEP_SIZE, PUNCH_HOLE, COLLAPSE/ZERO/INSERT/UNSHARE_RANGE):
  EOPNOTSUPP, the file unchanged;
- posix_fallocate(3): glibc emulates it (a one-byte write into every 4 KiB block the range adds
  or that reads as zero), so it works: the size grows, the new bytes read as zeros, what was
  there stays, and it is committed like any write; on an O_APPEND descriptor glibc answers EBADF;
- fallocate(1): `-l` (mode 0), `-p`, `-z`, `-c` fail ("Operation not supported"; for `-p` util-linux
  says "keep size mode is unsupported"); `-x` (posix_fallocate) works.
"""
from __future__ import annotations

import ctypes
import errno
import os
import pathlib
import subprocess

import pytest

from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes

MiB = 1 << 20
libc = ctypes.CDLL(None, use_errno=True)

KEEP_SIZE, PUNCH_HOLE, COLLAPSE_RANGE, ZERO_RANGE, INSERT_RANGE, UNSHARE_RANGE = 0x01, 0x02, 0x08, 0x10, 0x20, 0x40


def fallocate(fd: int, mode: int, offset: int, length: int) -> int:
    """fallocate(2) itself (os.posix_fallocate is glibc's, which emulates); its errno, 0 on success."""
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    return 0 if libc.fallocate(fd, mode, offset, length) == 0 else ctypes.get_errno()


def test_posix_fallocate_beyond_the_end_adds_zeros_keeps_data_and_commits(
        d: pathlib.Path, shared_cluster: Cluster) -> None:
    path = d / "f"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"abc", 0)
        os.pwrite(fd, b"XYZ", MiB + 5)          # size MiB + 8, a hole in between
        os.posix_fallocate(fd, 0, 3 * MiB + 100)
        assert os.fstat(fd).st_size == 3 * MiB + 100
    finally:
        os.close(fd)
    expected = bytearray(3 * MiB + 100)
    expected[0:3] = b"abc"
    expected[MiB + 5:MiB + 8] = b"XYZ"
    assert path.read_bytes() == expected
    # Committed at close: a fresh mount (no page cache) reads the same bytes.
    with Mount(shared_cluster.master_address, d.parent.parent / f"{d.name}-second") as other:
        assert (other.path / d.name / "f").read_bytes() == expected


def test_posix_fallocate_inside_the_file_changes_nothing(d: pathlib.Path) -> None:
    data = random_bytes(10_000, seed=7)
    (d / "f").write_bytes(data)
    fd = os.open(d / "f", os.O_RDWR)
    try:
        os.posix_fallocate(fd, 100, 5000)
        assert os.fstat(fd).st_size == len(data)
    finally:
        os.close(fd)
    assert (d / "f").read_bytes() == data


def test_posix_fallocate_of_a_range_past_the_end_leaves_zeros_before_it(d: pathlib.Path) -> None:
    fd = os.open(d / "f", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.posix_fallocate(fd, 2 * MiB, 4096)
        assert os.fstat(fd).st_size == 2 * MiB + 4096
    finally:
        os.close(fd)
    assert (d / "f").read_bytes() == bytes(2 * MiB + 4096)


def test_posix_fallocate_on_an_append_descriptor_is_ebadf(d: pathlib.Path) -> None:
    """glibc's emulation refuses O_APPEND descriptors (its one-byte writes would land at the end)."""
    (d / "f").write_bytes(b"abc")
    fd = os.open(d / "f", os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(OSError) as refused:
            os.posix_fallocate(fd, 0, MiB)
        assert refused.value.errno == errno.EBADF
    finally:
        os.close(fd)
    assert (d / "f").read_bytes() == b"abc"


@pytest.mark.parametrize("mode", [0, KEEP_SIZE, PUNCH_HOLE | KEEP_SIZE, COLLAPSE_RANGE, ZERO_RANGE,
                                  ZERO_RANGE | KEEP_SIZE, INSERT_RANGE, UNSHARE_RANGE],
                         ids=["0", "keep_size", "punch_hole", "collapse", "zero", "zero_keep", "insert", "unshare"])
def test_fallocate_modes_answer_eopnotsupp_and_change_nothing(d: pathlib.Path, mode: int) -> None:
    data = random_bytes(3 * 4096, seed=mode)
    (d / "f").write_bytes(data)
    fd = os.open(d / "f", os.O_RDWR)
    try:
        assert fallocate(fd, mode, 4096, 4096) == errno.EOPNOTSUPP
        assert fallocate(fd, mode, 4096, 4096) == errno.EOPNOTSUPP   # and again (the kernel's own answer)
        assert os.fstat(fd).st_size == len(data)
    finally:
        os.close(fd)
    assert (d / "f").read_bytes() == data


def test_the_fallocate_command(d: pathlib.Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["fallocate", *args], capture_output=True, text=True, check=False)

    path = str(d / "f")
    refused = run("-l", "1MiB", path)                        # fallocate(2) mode 0
    assert refused.returncode != 0 and "Operation not supported" in refused.stderr
    emulated = run("-x", "-l", "1MiB", path)                 # posix_fallocate(3): emulated by glibc
    assert emulated.returncode == 0, emulated.stderr
    assert os.stat(path).st_size == MiB
    pathlib.Path(path).write_bytes(b"y" * 8192)
    for flags in (["-p"], ["-z"], ["-c"]):                   # punch hole, zero range, collapse range
        out = run(*flags, "-o", "0", "-l", "4096", path)
        # EOPNOTSUPP: "Operation not supported", or for -p (keep size) "keep size mode is unsupported"
        assert out.returncode != 0 and "supported" in out.stderr, (flags, out.stderr)
    assert pathlib.Path(path).read_bytes() == b"y" * 8192
