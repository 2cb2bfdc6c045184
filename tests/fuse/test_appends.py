"""O_APPEND through a real mount (fuse/handles.py "Appends"; docs/fuse.md): append opens are
direct I/O, so these check what the kernel's page-cache path used to give them: records never
torn or lost between writers, other descriptors on the node seeing the appends, setuid/setgid
and security.capability dropped by a write, and where an append lands across two mounts.
"""
from __future__ import annotations

import errno
import mmap
import os
import pathlib
import stat
import struct
import threading
import time

import pytest

from tests.fuse.mounts import Mount, run_as
from tests.harness import Cluster, wait_until

RECORD = 64


def _append(path: pathlib.Path, writer: int, count: int, start: threading.Barrier) -> None:
    record = bytes([65 + writer]) * (RECORD - 1) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start.wait()
        for _ in range(count):
            assert os.write(fd, record) == RECORD
    finally:
        os.close(fd)


def _records(data: bytes) -> dict[int, int]:
    assert len(data) % RECORD == 0, len(data)
    counts: dict[int, int] = {}
    for offset in range(0, len(data), RECORD):
        record = data[offset:offset + RECORD]
        assert record == record[:1] * (RECORD - 1) + b"\n", f"torn record at {offset}: {record!r}"
        counts[record[0] - 65] = counts.get(record[0] - 65, 0) + 1
    return counts


@pytest.mark.parametrize("shared", [False, True], ids=["own-files", "one-file"])
def test_six_appenders_lose_and_tear_no_record(d: pathlib.Path, shared: bool) -> None:
    writers, count = 6, 500
    paths = [d / ("shared" if shared else f"w{w}") for w in range(writers)]
    start = threading.Barrier(writers)
    threads = [threading.Thread(target=_append, args=(paths[w], w, count, start)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts: dict[int, int] = {}
    for path in set(paths):
        for writer, n in _records(path.read_bytes()).items():
            counts[writer] = counts.get(writer, 0) + n
    assert counts == {w: count for w in range(writers)}


def test_appends_are_seen_by_cached_descriptors_and_mixed_writes(d: pathlib.Path) -> None:
    path = d / "log"
    path.write_bytes(b"a" * 5000)
    reader = os.open(path, os.O_RDONLY)
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    plain = os.open(path, os.O_RDWR)
    try:
        assert os.pread(reader, 8192, 0) == b"a" * 5000      # the page cache holds the tail page
        os.write(writer, b"b" * 100)
        assert os.pread(reader, 8192, 0) == b"a" * 5000 + b"b" * 100
        assert os.fstat(reader).st_size == 5100
        os.pwrite(plain, b"c" * 10, 5100)                     # a plain write at the end, then an append
        os.write(writer, b"d")
        assert os.pread(reader, 8192, 4990) == b"a" * 10 + b"b" * 100 + b"c" * 10 + b"d"
        with mmap.mmap(reader, 0, access=mmap.ACCESS_READ) as view:   # a read-only fd maps as before
            assert view[-1:] == b"d"
    finally:
        for fd in (reader, writer, plain):
            os.close(fd)
    assert path.read_bytes() == b"a" * 5000 + b"b" * 100 + b"c" * 10 + b"d"


def test_a_shared_mapping_of_an_append_descriptor_is_refused(d: pathlib.Path) -> None:
    """Direct I/O cannot keep a shared mapping coherent: the kernel refuses it (ENODEV), as it does
    for --direct-io mounts; private mappings and other descriptors map as before."""
    path = d / "f"
    path.write_bytes(b"x" * 4096)
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        with pytest.raises(OSError) as refused:
            mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED)
        assert refused.value.errno == errno.ENODEV
        with mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE) as view:
            assert view[:1] == b"x"
    finally:
        os.close(fd)


def test_an_unprivileged_append_clears_setuid_and_setgid(d: pathlib.Path) -> None:
    path = d / "suid"
    path.write_bytes(b"abc")
    os.chmod(path, 0o6777)
    append = "import sys; f = open(sys.argv[1], 'ab'); f.write(b'X'); f.close()"
    result = run_as(1000, 1000, append, str(path))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777
    assert path.read_bytes() == b"abcX"
    os.chmod(path, 0o6777)
    with open(path, "ab") as fh:         # root (CAP_FSETID) keeps the bits
        fh.write(b"Y")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o6777


@pytest.mark.parametrize("flags", [os.O_WRONLY | os.O_APPEND, os.O_WRONLY], ids=["append", "plain"])
def test_a_write_drops_security_capability(d: pathlib.Path, flags: int) -> None:
    path = d / "tool"
    path.write_bytes(b"\x7fELF")
    # struct vfs_cap_data, revision 2, effective, CAP_NET_RAW (13) permitted
    caps = struct.pack("<5I", 0x02000001, 1 << 13, 0, 0, 0)
    os.setxattr(path, "security.capability", caps)
    assert os.getxattr(path, "security.capability") == caps
    fd = os.open(path, flags)
    try:
        os.write(fd, b"!")
    finally:
        os.close(fd)
    with pytest.raises(OSError) as gone:
        os.getxattr(path, "security.capability")
    assert gone.value.errno == errno.ENODATA


def test_appends_follow_a_close_on_another_mount(d: pathlib.Path, shared_cluster: Cluster,
                                                  shared_mount: Mount) -> None:
    """Close-to-open for appends: B's kernel may hold the file's old size (a stat within the
    attribute timeout), the append still lands after what A closed."""
    path_a = d / "log"
    path_a.write_bytes(b"1" * 10)
    with Mount(shared_cluster.master_address, d.parent.parent / f"{d.name}-b") as other:
        path_b = other.path / d.name / "log"
        assert path_b.stat().st_size == 10                    # B caches the size
        with open(path_a, "ab") as fh:
            fh.write(b"2" * 10)
        with open(path_b, "ab") as fh:                        # within B's attribute timeout
            fh.write(b"3" * 10)
        with open(path_a, "ab") as fh:
            fh.write(b"4" * 10)
        assert path_b.read_bytes() == b"1" * 10 + b"2" * 10 + b"3" * 10 + b"4" * 10
    assert path_a.read_bytes() == b"1" * 10 + b"2" * 10 + b"3" * 10 + b"4" * 10


def test_an_append_while_the_master_is_down_is_written_and_its_close_fails(tmp_path: pathlib.Path) -> None:
    """The capability check before the first append cannot reach the master: as the kernel's own
    check, it lets the write through (into the open file's buffer, within the deadline); the
    close cannot commit and says so."""
    deadline = 3.0
    with Cluster(tmp_path / "cluster", workers=1) as cluster, \
            Mount(cluster.master_address, tmp_path / "mnt", deadline=deadline) as mount:
        path = mount.path / "log"
        path.write_bytes(b"committed\n")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        cluster.kill_master()
        started = time.monotonic()
        assert os.write(fd, b"pending\n") == 8
        assert time.monotonic() - started < deadline + 2.0
        with pytest.raises(OSError) as failed:
            os.close(fd)
        assert failed.value.errno in (errno.EIO, errno.ETIMEDOUT)
        cluster.start_master()

        def committed() -> bool:     # EIO until the mount's channel has reconnected
            try:
                return path.read_bytes() == b"committed\n"
            except OSError:
                return False

        wait_until(committed, 20, "the mount reading what was committed before")
