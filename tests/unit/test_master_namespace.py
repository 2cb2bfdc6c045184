"""Namespace semantics of the master store, called directly (no gRPC): create, lookup, resolve,
setattr, links, unlink/rmdir, orphans, readdir, xattrs, persistence. Every test ends with the
store's consistency check finding nothing."""
from __future__ import annotations

import errno
import pathlib

import pytest

from curvine_py.core.errors import (
    AlreadyExists,
    CurvineError,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    NameTooLong,
    NoData,
    NotADirectory,
    NotFound,
    NotPermitted,
)
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import (
    ROOT_INO,
    XATTR_CREATE,
    XATTR_REPLACE,
    FileType,
    SetAttrChanges,
)
from tests.unit.test_master_support import FakeClock, mkdir, mkfile, on_postgresql, open_store

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

# ---------------------------------------------------------------------------------------------- root, create


def test_root_is_inode_1_a_0755_directory_owned_by_root(ns: Namespace) -> None:
    root = ns.getattr(ROOT_INO)
    assert (root.ino, root.type, root.mode, root.uid, root.gid, root.nlink) == (
        1, FileType.DIRECTORY, 0o755, 0, 0, 2)


def test_create_file_sets_attrs_and_touches_parent(ns: Namespace) -> None:
    before = ns.getattr(ROOT_INO)
    attr = ns.create(ROOT_INO, "f", FileType.REGULAR, 0o100640, uid=1000, gid=100)
    assert attr.type == FileType.REGULAR
    assert attr.mode == 0o640              # S_IFMT stripped
    assert (attr.uid, attr.gid, attr.size, attr.nlink) == (1000, 100, 0, 1)
    assert attr.block_size == 4 << 20
    after = ns.getattr(ROOT_INO)
    assert after.mtime_ns > before.mtime_ns and after.ctime_ns > before.ctime_ns
    assert after.nlink == 2                 # files do not add links to the parent
    assert ns.lookup(ROOT_INO, "f") == attr
    assert ns.getattr(attr.ino) == attr


def test_mkdir_has_two_links_and_bumps_parent_nlink(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    assert d.nlink == 2
    assert ns.getattr(ROOT_INO).nlink == 3
    mkdir(ns, "e", d.ino)
    assert ns.getattr(d.ino).nlink == 3
    assert ns.getattr(ROOT_INO).nlink == 3


def test_inode_numbers_are_never_reused(ns: Namespace) -> None:
    a = mkfile(ns, "a")
    ns.unlink(ROOT_INO, "a")
    b = mkfile(ns, "a")
    assert b.ino > a.ino


def test_exclusive_create_of_existing_name_is_eexist(ns: Namespace) -> None:
    mkfile(ns, "f")
    with pytest.raises(AlreadyExists):
        mkfile(ns, "f")
    mkdir(ns, "d")
    with pytest.raises(AlreadyExists):
        mkdir(ns, "d")
    with pytest.raises(AlreadyExists):           # mkdir over a file, non-exclusive or not
        ns.create(ROOT_INO, "f", FileType.DIRECTORY, 0o755, exclusive=False)


def test_non_exclusive_create_opens_existing_file(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.setattr(f.ino, SetAttrChanges(size=100))
    again = ns.create(ROOT_INO, "f", FileType.REGULAR, 0o600, exclusive=False)
    assert again.ino == f.ino and again.size == 100 and again.mode == 0o644
    emptied = ns.create(ROOT_INO, "f", FileType.REGULAR, 0o600, exclusive=False, truncate=True)
    assert emptied.ino == f.ino and emptied.size == 0


def test_non_exclusive_create_over_directory_is_eisdir(ns: Namespace) -> None:
    mkdir(ns, "d")
    with pytest.raises(IsADirectory):
        ns.create(ROOT_INO, "d", FileType.REGULAR, 0o644, exclusive=False)


def test_create_needs_an_existing_directory_parent(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    with pytest.raises(NotADirectory):
        mkfile(ns, "x", parent=f.ino)
    with pytest.raises(NotFound):
        mkfile(ns, "x", parent=999)
    with pytest.raises(NotFound):
        mkfile(ns, "x", parent=1 << 64 - 1)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "nul\x00"])
def test_invalid_names_are_rejected(ns: Namespace, name: str) -> None:
    with pytest.raises(InvalidArgument):
        mkfile(ns, name)


def test_name_longer_than_255_bytes_is_enametoolong(ns: Namespace) -> None:
    mkfile(ns, "x" * 255)
    with pytest.raises(NameTooLong):
        mkfile(ns, "x" * 256)
    with pytest.raises(NameTooLong):
        mkfile(ns, "é" * 128)                  # 256 bytes in UTF-8


def test_unknown_or_missing_type_is_invalid(ns: Namespace) -> None:
    with pytest.raises(InvalidArgument):
        ns.create(ROOT_INO, "x", 0, 0o644)
    with pytest.raises(InvalidArgument):
        ns.create(ROOT_INO, "x", 42, 0o644)


def test_symlink_stores_target_and_its_length(ns: Namespace) -> None:
    link = ns.create(ROOT_INO, "l", FileType.SYMLINK, 0o777, symlink_target="some/where")
    assert link.type == FileType.SYMLINK and link.size == len("some/where")
    assert ns.readlink(link.ino) == "some/where"
    with pytest.raises(InvalidArgument):
        ns.readlink(mkfile(ns, "f").ino)
    with pytest.raises(InvalidArgument):
        ns.create(ROOT_INO, "empty", FileType.SYMLINK, 0o777, symlink_target="")
    with pytest.raises(NotFound):
        ns.readlink(12345)


def test_special_files_keep_rdev_only_for_devices(ns: Namespace) -> None:
    fifo = ns.create(ROOT_INO, "p", FileType.FIFO, 0o600, rdev=7)
    dev = ns.create(ROOT_INO, "c", FileType.CHARDEV, 0o600, rdev=0x0501)
    sock = ns.create(ROOT_INO, "s", FileType.SOCKET, 0o600)
    assert (fifo.type, fifo.rdev) == (FileType.FIFO, 0)
    assert (dev.type, dev.rdev) == (FileType.CHARDEV, 0x0501)
    assert sock.type == FileType.SOCKET


def test_setgid_directory_passes_its_group_down(ns: Namespace) -> None:
    d = ns.create(ROOT_INO, "shared", FileType.DIRECTORY, 0o2775, uid=1, gid=50)
    f = ns.create(d.ino, "f", FileType.REGULAR, 0o644, uid=2, gid=60)
    sub = ns.create(d.ino, "sub", FileType.DIRECTORY, 0o755, uid=2, gid=60)
    assert f.gid == 50 and sub.gid == 50 and sub.mode & 0o2000


# ---------------------------------------------------------------------------------------------- lookup, resolve


def test_lookup_dot_and_dotdot(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    e = mkdir(ns, "e", d.ino)
    assert ns.lookup(e.ino, ".").ino == e.ino
    assert ns.lookup(e.ino, "..").ino == d.ino
    assert ns.lookup(ROOT_INO, "..").ino == ROOT_INO


def test_lookup_errors(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    with pytest.raises(NotFound) as missing:
        ns.lookup(ROOT_INO, "nope")
    assert missing.value.errno == errno.ENOENT
    with pytest.raises(NotADirectory):
        ns.lookup(f.ino, "x")
    with pytest.raises(NotFound):
        ns.getattr(424242)


def test_resolve_path_walks_directories(ns: Namespace) -> None:
    a = mkdir(ns, "a")
    b = mkdir(ns, "b", a.ino)
    f = mkfile(ns, "f", b.ino)
    assert ns.resolve_path("/").ino == ROOT_INO
    assert ns.resolve_path("/a/b/f").ino == f.ino
    assert ns.resolve_path("//a/./b/../b/f").ino == f.ino
    assert ns.resolve_path("/../../a").ino == a.ino        # '..' stops at the root
    with pytest.raises(NotFound):
        ns.resolve_path("/a/missing")
    with pytest.raises(NotADirectory):
        ns.resolve_path("/a/b/f/x")
    with pytest.raises(NotADirectory):
        ns.resolve_path("/a/b/f/")                          # trailing slash on a file
    with pytest.raises(InvalidArgument):
        ns.resolve_path("a/b")


def test_resolve_path_follows_symlinks(ns: Namespace) -> None:
    a = mkdir(ns, "a")
    b = mkdir(ns, "b", a.ino)
    f = mkfile(ns, "f", b.ino)
    ns.create(ROOT_INO, "abs", FileType.SYMLINK, 0o777, symlink_target="/a/b")
    ns.create(a.ino, "rel", FileType.SYMLINK, 0o777, symlink_target="b/f")
    ns.create(b.ino, "up", FileType.SYMLINK, 0o777, symlink_target="../rel")
    assert ns.resolve_path("/abs/f").ino == f.ino              # intermediate link always followed
    assert ns.resolve_path("/a/rel").ino == f.ino
    assert ns.resolve_path("/a/b/up").ino == f.ino             # link to a link, relative with '..'
    nofollow = ns.resolve_path("/a/rel", follow_symlinks=False)
    assert nofollow.type == FileType.SYMLINK
    assert ns.resolve_path("/abs/", follow_symlinks=False).ino == b.ino   # trailing slash follows


def test_symlink_loops_are_eloop(ns: Namespace) -> None:
    ns.create(ROOT_INO, "loop", FileType.SYMLINK, 0o777, symlink_target="/loop")
    ns.create(ROOT_INO, "ping", FileType.SYMLINK, 0o777, symlink_target="pong")
    ns.create(ROOT_INO, "pong", FileType.SYMLINK, 0o777, symlink_target="ping")
    for path in ("/loop", "/ping", "/loop/x"):
        with pytest.raises(CurvineError) as exc:
            ns.resolve_path(path)
        assert exc.value.errno == errno.ELOOP
    assert ns.resolve_path("/loop", follow_symlinks=False).type == FileType.SYMLINK


def test_chain_of_40_symlinks_resolves_and_41_is_eloop(ns: Namespace) -> None:
    f = mkfile(ns, "target")
    previous = "target"
    for i in range(41):
        ns.create(ROOT_INO, f"l{i}", FileType.SYMLINK, 0o777, symlink_target=previous)
        previous = f"l{i}"
    assert ns.resolve_path("/l39").ino == f.ino     # 40 links
    with pytest.raises(CurvineError) as exc:
        ns.resolve_path("/l40")                      # 41 links
    assert exc.value.errno == errno.ELOOP


# ---------------------------------------------------------------------------------------------- setattr


def test_chmod_chown_update_ctime_only(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    changed = ns.setattr(f.ino, SetAttrChanges(mode=0o104755, uid=7, gid=8))
    assert (changed.mode, changed.uid, changed.gid) == (0o4755, 7, 8)
    assert changed.ctime_ns > f.ctime_ns
    assert changed.mtime_ns == f.mtime_ns and changed.atime_ns == f.atime_ns


def test_utimes_explicit_and_now(ns: Namespace, clock: FakeClock) -> None:
    f = mkfile(ns, "f")
    set_ = ns.setattr(f.ino, SetAttrChanges(atime_ns=1_000, mtime_ns=2_000))
    assert (set_.atime_ns, set_.mtime_ns) == (1_000, 2_000)
    now = ns.setattr(f.ino, SetAttrChanges(atime_now=True, mtime_now=True))
    assert now.atime_ns == now.mtime_ns == now.ctime_ns > 2_000
    explicit_ctime = ns.setattr(f.ino, SetAttrChanges(ctime_ns=5))
    assert explicit_ctime.ctime_ns == 5


def test_truncate_only_applies_to_regular_files(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    link = ns.create(ROOT_INO, "l", FileType.SYMLINK, 0o777, symlink_target="x")
    with pytest.raises(IsADirectory):
        ns.setattr(d.ino, SetAttrChanges(size=0))
    with pytest.raises(InvalidArgument):
        ns.setattr(link.ino, SetAttrChanges(size=0))
    with pytest.raises(NotFound):
        ns.setattr(999, SetAttrChanges(mode=0o600))


def test_truncate_changes_size_mtime_and_ctime(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    grown = ns.setattr(f.ino, SetAttrChanges(size=12345))
    assert grown.size == 12345 and grown.mtime_ns > f.mtime_ns and grown.ctime_ns > f.ctime_ns


def test_truncate_to_one_petabyte_is_sparse(ns: Namespace) -> None:
    """Growing a file records a size and nothing else: no block rows, nothing stored (so its cost
    cannot depend on the size; no timing needed to show it)."""
    f = mkfile(ns, "huge")
    big = ns.setattr(f.ino, SetAttrChanges(size=10**15))
    assert big.size == 10**15 and big.stored_bytes == 0
    assert ns.get_blocks(f.ino).blocks == ()
    assert ns.counts().blocks == 0
    assert ns.getattr(f.ino).size == 10**15


# ---------------------------------------------------------------------------------------------- links, unlink


def test_hard_links_count_and_share_the_inode(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    d = mkdir(ns, "d")
    linked = ns.link(f.ino, d.ino, "g")
    assert linked.nlink == 2 and linked.ctime_ns > f.ctime_ns
    assert ns.lookup(d.ino, "g").ino == f.ino
    assert ns.unlink(ROOT_INO, "f").nlink == 1
    assert ns.getattr(f.ino).nlink == 1
    result = ns.unlink(d.ino, "g")
    assert (result.ino, result.nlink) == (f.ino, 0)
    with pytest.raises(NotFound):
        ns.getattr(f.ino)


def test_link_errors(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    d = mkdir(ns, "d")
    with pytest.raises(NotPermitted) as to_dir:
        ns.link(d.ino, ROOT_INO, "d2")
    assert to_dir.value.errno == errno.EPERM
    with pytest.raises(AlreadyExists):
        ns.link(f.ino, ROOT_INO, "d")
    with pytest.raises(NotADirectory):
        ns.link(f.ino, f.ino, "x")
    with pytest.raises(NotFound):
        ns.link(999, ROOT_INO, "x")


def test_unlink_and_rmdir_type_rules(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    d = mkdir(ns, "d")
    mkfile(ns, "inner", d.ino)
    with pytest.raises(NotFound):
        ns.unlink(ROOT_INO, "missing")
    with pytest.raises(IsADirectory):
        ns.unlink(ROOT_INO, "d")
    with pytest.raises(NotADirectory):
        ns.unlink(ROOT_INO, "f", directory=True)
    with pytest.raises(DirectoryNotEmpty) as full:
        ns.unlink(ROOT_INO, "d", directory=True)
    assert full.value.errno == errno.ENOTEMPTY
    ns.unlink(d.ino, "inner")
    assert ns.getattr(ROOT_INO).nlink == 3
    removed = ns.unlink(ROOT_INO, "d", directory=True)
    assert (removed.ino, removed.nlink) == (d.ino, 0)
    assert ns.getattr(ROOT_INO).nlink == 2
    with pytest.raises(NotFound):
        ns.getattr(d.ino)
    assert ns.getattr(f.ino).nlink == 1


def test_unlink_touches_parent(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    mkfile(ns, "f", d.ino)
    before = ns.getattr(d.ino)
    ns.unlink(d.ino, "f")
    after = ns.getattr(d.ino)
    assert after.mtime_ns > before.mtime_ns and after.ctime_ns > before.ctime_ns


def test_orphan_survives_until_released(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.setxattr(f.ino, "user.k", b"v")
    result = ns.unlink(ROOT_INO, "f", keep_orphan=True)
    assert (result.ino, result.nlink) == (f.ino, 0)
    with pytest.raises(NotFound):
        ns.lookup(ROOT_INO, "f")
    orphan = ns.getattr(f.ino)                       # fstat on the open handle still works
    assert orphan.nlink == 0
    ns.setattr(f.ino, SetAttrChanges(size=10))       # and so does writing to it
    with pytest.raises(NotFound):
        ns.link(f.ino, ROOT_INO, "back")             # no resurrection (linkat on unlinked: ENOENT)
    ns.release_orphan(f.ino)
    with pytest.raises(NotFound):
        ns.getattr(f.ino)
    ns.release_orphan(f.ino)                         # idempotent
    ns.release_orphan(12345)


def test_rename_over_an_open_file_can_keep_it_as_an_orphan(ns: Namespace) -> None:
    old = mkfile(ns, "x")
    new = mkfile(ns, "x.tmp")
    result = ns.rename(ROOT_INO, "x.tmp", ROOT_INO, "x", keep_orphan=True)
    assert (result.replaced_ino, result.replaced_nlink) == (old.ino, 0)
    assert ns.lookup(ROOT_INO, "x").ino == new.ino
    assert ns.getattr(old.ino).nlink == 0          # still readable through its open handle
    assert ns.check() == []
    ns.release_orphan(old.ino)
    with pytest.raises(NotFound):
        ns.getattr(old.ino)
    other = mkfile(ns, "y")
    ns.rename(ROOT_INO, "x", ROOT_INO, "y")         # without keep_orphan: freed at once
    with pytest.raises(NotFound):
        ns.getattr(other.ino)


def test_release_orphan_ignores_linked_files(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.release_orphan(f.ino)
    assert ns.getattr(f.ino).nlink == 1


def test_orphan_with_other_names_is_not_an_orphan(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.link(f.ino, ROOT_INO, "g")
    assert ns.unlink(ROOT_INO, "f", keep_orphan=True).nlink == 1
    assert ns.lookup(ROOT_INO, "g").ino == f.ino


# ---------------------------------------------------------------------------------------------- readdir


def test_readdir_sorted_with_attrs_and_pagination(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    names = ["b", "a", "c", "Z", "é", "aa"]
    for name in names:
        mkfile(ns, name, d.ino)
    mkdir(ns, "sub", d.ino)
    entries, more = ns.readdir(d.ino)
    assert [e.name for e in entries] == sorted(names + ["sub"], key=lambda n: n.encode())
    assert not more
    assert next(e for e in entries if e.name == "sub").attr.type == FileType.DIRECTORY
    assert all(e.attr == ns.lookup(d.ino, e.name) for e in entries)
    collected: list[str] = []
    after = ""
    while True:
        page, more = ns.readdir(d.ino, after, 2)
        collected += [e.name for e in page]
        assert len(page) <= 2
        if not more:
            break
        after = page[-1].name
    assert collected == [e.name for e in entries]


def test_readdir_errors_and_empty(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    empty = mkdir(ns, "empty")
    assert ns.readdir(empty.ino) == ([], False)
    with pytest.raises(NotADirectory):
        ns.readdir(f.ino)
    with pytest.raises(NotFound):
        ns.readdir(999)


# ---------------------------------------------------------------------------------------------- xattrs


def test_xattr_set_get_list_remove(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.setxattr(f.ino, "user.b", b"2")
    ns.setxattr(f.ino, "user.a", b"\x00\xff")
    assert ns.getxattr(f.ino, "user.a") == b"\x00\xff"
    assert ns.listxattr(f.ino) == ["user.a", "user.b"]
    ns.setxattr(f.ino, "user.a", b"new")
    assert ns.getxattr(f.ino, "user.a") == b"new"
    before = ns.getattr(f.ino).ctime_ns
    ns.removexattr(f.ino, "user.a")
    assert ns.getattr(f.ino).ctime_ns > before
    assert ns.listxattr(f.ino) == ["user.b"]
    ns.setxattr(f.ino, "user.empty", b"")
    assert ns.getxattr(f.ino, "user.empty") == b""


def test_xattr_flags_and_missing(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    with pytest.raises(NoData) as missing:
        ns.getxattr(f.ino, "user.x")
    assert missing.value.errno == errno.ENODATA
    with pytest.raises(NoData):
        ns.setxattr(f.ino, "user.x", b"1", XATTR_REPLACE)
    ns.setxattr(f.ino, "user.x", b"1", XATTR_CREATE)
    with pytest.raises(AlreadyExists):
        ns.setxattr(f.ino, "user.x", b"2", XATTR_CREATE)
    ns.setxattr(f.ino, "user.x", b"3", XATTR_REPLACE)
    assert ns.getxattr(f.ino, "user.x") == b"3"
    with pytest.raises(NoData):
        ns.removexattr(f.ino, "user.nope")
    with pytest.raises(InvalidArgument):
        ns.setxattr(f.ino, "user.x", b"3", XATTR_CREATE | XATTR_REPLACE)
    with pytest.raises(NotFound):
        ns.setxattr(999, "user.x", b"1")


def test_xattr_size_limits(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.setxattr(f.ino, "u" * 255, b"v" * 65536)
    assert len(ns.getxattr(f.ino, "u" * 255)) == 65536
    with pytest.raises(InvalidArgument) as long_name:
        ns.setxattr(f.ino, "u" * 256, b"v")
    assert long_name.value.errno == errno.ERANGE
    with pytest.raises(InvalidArgument) as big_value:
        ns.setxattr(f.ino, "user.big", b"v" * 65537)
    assert big_value.value.errno == errno.E2BIG
    with pytest.raises(InvalidArgument):
        ns.getxattr(f.ino, "")


def test_xattrs_go_with_the_inode(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.setxattr(f.ino, "user.k", b"v")
    d = mkdir(ns, "d")
    ns.setxattr(d.ino, "user.k", b"v")
    ns.unlink(ROOT_INO, "f")
    ns.unlink(ROOT_INO, "d", directory=True)
    assert ns._db.execute("SELECT COUNT(*) FROM xattrs").fetchone()[0] == 0


# ---------------------------------------------------------------------------------------------- durability


def test_state_survives_reopen(tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    cluster_id = ns.cluster_id
    d = mkdir(ns, "d")
    f = mkfile(ns, "f", d.ino)
    ns.setxattr(f.ino, "user.k", b"v")
    ns.close()
    again = open_store(tmp_path, clock)
    assert again.cluster_id == cluster_id
    assert again.resolve_path("/d/f").ino == f.ino
    assert again.getxattr(f.ino, "user.k") == b"v"
    assert again.getattr(ROOT_INO).nlink == 3
    assert mkfile(again, "g").ino > f.ino
    assert again.check() == []
    again.close()


def test_store_uses_wal_and_full_sync(ns: Namespace) -> None:
    if on_postgresql():   # the writer session holds the leader lock (store/pgengine.py) instead
        assert ns._db.execute("SELECT COUNT(*) FROM pg_locks WHERE locktype='advisory' AND "
                              "pid=pg_backend_pid() AND granted").fetchone()[0] == 1
        assert ns._db.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        return
    assert ns._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert ns._db.execute("PRAGMA synchronous").fetchone()[0] == 2    # FULL


def test_failed_operation_leaves_no_trace(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    mkfile(ns, "f", d.ino)
    snapshot = ns.readdir(ROOT_INO), ns.readdir(d.ino), ns.getattr(ROOT_INO)
    with pytest.raises(DirectoryNotEmpty):
        ns.unlink(ROOT_INO, "d", directory=True)
    assert (ns.readdir(ROOT_INO), ns.readdir(d.ino), ns.getattr(ROOT_INO)) == snapshot
    assert not ns._db.in_transaction
