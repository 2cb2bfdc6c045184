"""Listings of directories larger than one master page (fuse/readdir.py asks the master for 512
entries at a time, the kernel for a few dozen per getdents) through a real mount: every name once
with its type and attributes, offsets that resume anywhere (also across a page's end), and entries
added or removed between pages. getdents64 is called directly with a small buffer, so the test
decides where a listing pauses."""
from __future__ import annotations

import ctypes
import os
import pathlib
import platform
import stat
import struct

import pytest

from curvine_py.core.domain import Attr, FileType, NewNode
from curvine_py.core.posix import ROOT_INO
from curvine_py.fuse.operations import Operations
from tests.fuse.middle import ROOT_CTX, Rig
from tests.fuse.mounts import Mount
from tests.harness import Cluster

SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)
_DIRENT = struct.Struct("=QqHB")       # d_ino, d_off, d_reclen, d_type; d_name follows, NUL-ended

pytestmark = pytest.mark.skipif(SYS_GETDENTS64 is None, reason="getdents64's number on this machine is not known")

COUNT = 1300          # three master pages: 512 + 512 + 276
DT_DIR, DT_REG, DT_LNK = 4, 8, 10


def getdents(fd: int, size: int = 2048) -> list[tuple[str, int, int]]:
    """One getdents64 call: (name, d_off, d_type) of what the kernel returned; [] at the end."""
    buf = ctypes.create_string_buffer(size)
    n = _libc.syscall(SYS_GETDENTS64, fd, buf, size)
    if n < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    out, pos, raw = [], 0, buf.raw[:n]
    while pos < n:
        _, off, reclen, kind = _DIRENT.unpack_from(raw, pos)
        name = raw[pos + _DIRENT.size:pos + reclen].split(b"\0", 1)[0].decode()
        out.append((name, off, kind))
        pos += reclen
    return out


def read_all(fd: int, size: int = 2048) -> list[tuple[str, int, int]]:
    out = []
    while batch := getdents(fd, size):
        out += batch
    return out


def name(i: int) -> str:
    return f"e{i:05d}"


def populate(d: pathlib.Path) -> dict[str, int]:
    """COUNT entries: mostly files of distinct sizes and modes, a directory every 50th, a symlink
    every 50th + 1. Returns name -> expected d_type."""
    kinds = {}
    for i in range(COUNT):
        path = d / name(i)
        if i % 50 == 0:
            path.mkdir(mode=0o750)
            kinds[path.name] = DT_DIR
        elif i % 50 == 1:
            os.symlink(f"target-{i}", path)
            kinds[path.name] = DT_LNK
        else:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.ftruncate(fd, i)
            os.fchmod(fd, 0o600 | (i % 8) << 3)
            os.close(fd)
            kinds[path.name] = DT_REG
    return kinds


def test_every_name_once_with_its_type_and_attributes(d: pathlib.Path, shared_cluster: Cluster) -> None:
    kinds = populate(d)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listed = read_all(fd)
    finally:
        os.close(fd)
    names = [n for n, _, _ in listed]
    assert names[:2] == [".", ".."] and sorted(names[2:]) == sorted(kinds), "every name exactly once"
    assert {n: k for n, _, k in listed[2:]} == kinds
    offsets = [off for _, off, _ in listed]
    assert len(set(offsets)) == len(offsets), "offsets are distinct"
    # The attributes the listing gave (readdirplus: the kernel answers the lstat from them) are
    # the master's, entry by entry, across the three pages.
    master = shared_cluster.client().master
    parent = master.resolve(f"/{d.name}")
    by_name = {e.name: e.attr for e in master.readdir_all(parent.ino)}
    for entry in sorted(kinds):
        seen, truth = os.lstat(d / entry), by_name[entry]
        assert (seen.st_mode, seen.st_size, seen.st_nlink, seen.st_mtime_ns, seen.st_ctime_ns) == \
            (truth.st_mode, truth.size, truth.nlink, truth.mtime_ns, truth.ctime_ns), entry
        i = int(entry[1:])
        if kinds[entry] == DT_REG:
            assert stat.S_IMODE(seen.st_mode) == 0o600 | (i % 8) << 3 and seen.st_size == i
        elif kinds[entry] == DT_DIR:
            assert stat.S_IMODE(seen.st_mode) == 0o750 and stat.S_ISDIR(seen.st_mode)
        else:
            assert os.readlink(d / entry) == f"target-{i}"


def test_a_listing_resumes_at_any_offset_also_across_a_page_end(d: pathlib.Path) -> None:
    kinds = populate(d)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listed = read_all(fd, 1024)
        assert sorted(n for n, _, _ in listed[2:]) == sorted(kinds)
        # d_off of an entry is where the listing continues after it: the entries just before and
        # after each master page's end (entries start after "." and ".."), the dots, and the last.
        # (A resumed listing numbers what it lists anew: compare names and types, not offsets.)
        for at in (0, 1, 2, 300, 511, 512, 513, 514, 1023, 1024, 1025, 1026, len(listed) - 2, len(listed) - 1):
            os.lseek(fd, listed[at][1], os.SEEK_SET)
            again = [(n, k) for n, _, k in read_all(fd, 1024)]
            assert again == [(n, k) for n, _, k in listed[at + 1:]], f"resumed after entry {at} ({listed[at][0]})"
        os.lseek(fd, 0, os.SEEK_SET)
        assert [(n, k) for n, _, k in read_all(fd)] == [(n, k) for n, _, k in listed], "rewound: the same listing"
    finally:
        os.close(fd)


def test_entries_added_and_removed_between_pages(d: pathlib.Path, shared_cluster: Cluster) -> None:
    """POSIX leaves open whether a name added or removed during a listing shows; every other name
    shows exactly once, and the listing continues after the name it stopped at. Names changed in
    a page the mount has not fetched yet are seen as they are when it does."""
    kinds = populate(d)
    master = shared_cluster.client().master
    parent = master.resolve(f"/{d.name}").ino
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first: list[tuple[str, int, int]] = []
        while len(first) < 600:          # past the first master page, well short of the third
            batch = getdents(fd, 1024)
            assert batch
            first += batch
        listed_so_far = {n for n, _, _ in first}
        last = max(listed_so_far - {".", ".."})
        assert last < name(700)
        listed_removed = [name(i) for i in range(100, 150) if i % 50 > 1]           # already listed
        later_removed = [name(i) for i in range(1100, 1150) if i % 50 > 1]          # third page
        for n in listed_removed + later_removed:
            os.unlink(d / n)                         # through this mount
        added_before = [f"a{i:03d}" for i in range(30)]   # sort before everything listed
        added_later = [f"z{i:03d}" for i in range(30)]    # after every name: the last page
        for n in added_before + added_later:          # through another client (another node)
            master.create(NewNode(parent, n, FileType.REGULAR, 0o644))
        rest = read_all(fd, 1024)
    finally:
        os.close(fd)
    names = [n for n, _, _ in first + rest]
    assert len(names) == len(set(names)), "no name twice"
    untouched = set(kinds) - set(listed_removed) - set(later_removed)
    assert untouched <= set(names), "every name not changed during the listing shows"
    assert not set(later_removed) & set(names), "removed before its page was fetched: not shown"
    assert set(added_later) <= set(names), "added before its page was fetched: shown"
    assert not set(added_before) & {n for n, _, _ in rest}, "the listing went on after where it stopped"
    assert all(n > last for n, _, _ in rest)
    expected = (set(kinds) - set(listed_removed) - set(later_removed)) | set(added_before) | set(added_later)
    assert sorted(os.listdir(d)) == sorted(expected), "a new listing shows the directory as it is"


def test_a_listing_of_a_directory_emptied_meanwhile_ends(d: pathlib.Path, shared_mount: Mount) -> None:
    kinds = populate(d)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = getdents(fd, 1024)
        assert first and first[0][0] == "."
        for n, kind in kinds.items():
            (os.rmdir if kind == DT_DIR else os.unlink)(d / n)
        rest = read_all(fd, 1024)
        names = [n for n, _, _ in first + rest]
        assert len(names) == len(set(names)), "no name twice"
        # what the mount still held of its first page may show; nothing of the later pages
        assert all(n in kinds for n in names[2:]) and all(n < name(512) for n in names[2:])
    finally:
        os.close(fd)
    assert os.listdir(d) == []


def test_lookups_in_a_hot_directory_answer_from_fetched_pages_exactly(shared_cluster: Cluster) -> None:
    """The middle tier (no kernel, so no kernel cache answers first): looking up every name of a
    three-page directory turns it hot, the mount fetches pages of names (fuse/names.py, entries
    whose attributes are built on first use) and answers from them; every answer is the master's."""
    master = shared_cluster.client().master
    top = master.create(NewNode(ROOT_INO, "hot-lookups", FileType.DIRECTORY, 0o755))
    nodes = [NewNode(top.ino, name(i), FileType.DIRECTORY if i % 50 == 0 else FileType.REGULAR, 0o600 | i % 64)
             for i in range(COUNT)]
    for start in range(0, COUNT, 200):
        assert not [r for r in master.create_many(nodes[start:start + 200]) if isinstance(r, Exception)]
    truth = {e.name: e.attr for e in master.readdir_all(top.ino)}
    rig = Rig(shared_cluster, attr_ttl=60.0)
    served: list[int] = []
    answered = [0]       # lookups the name cache answered (the direct signal, beside its size)

    async def scenario(ops: Operations) -> None:
        assert rig.fs is not None
        names = rig.fs.ctx.attrs.names
        cached_get = names.get

        def counting_get(parent: int, child: str) -> tuple[Attr, float] | None:
            found = cached_get(parent, child)
            answered[0] += found is not None
            return found

        names.get = counting_get  # type: ignore[method-assign]
        for i in range(COUNT):
            entry = await ops.lookup(top.ino, name(i).encode(), ROOT_CTX)  # type: ignore[arg-type]
            want = truth[name(i)]
            assert (entry.st_mode, entry.st_size, entry.st_nlink, entry.st_mtime_ns, entry.st_ctime_ns) == \
                (want.st_mode, want.size, want.nlink, want.mtime_ns, want.ctime_ns), name(i)
            served.append(len(names))
            await ops.forget([(entry.st_ino, 1)])

    rig.run(scenario)
    assert max(served) >= 500, "lookups were answered from fetched pages"
    assert answered[0] >= 500, f"only {answered[0]} of {COUNT} lookups answered by the name cache"
