"""rename(2)/renameat2(2) in the master store: moves, replacement rules, RENAME_NOREPLACE and
RENAME_EXCHANGE, subtree checks, nlink accounting, atomicity."""
from __future__ import annotations

import errno

import pytest

from curvine_py.core.errors import (
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
)
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO, RenameResult
from tests.unit.test_master_support import mkdir, mkfile

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL


def names(ns: Namespace, ino: int) -> list[str]:
    return [e.name for e in ns.readdir(ino)[0]]


def test_rename_within_a_directory(ns: Namespace) -> None:
    f = mkfile(ns, "a")
    assert ns.rename(ROOT_INO, "a", ROOT_INO, "b") == RenameResult()
    assert names(ns, ROOT_INO) == ["b"]
    moved = ns.getattr(f.ino)
    assert moved.ctime_ns > f.ctime_ns


def test_rename_across_directories_moves_dir_links(ns: Namespace) -> None:
    src = mkdir(ns, "src")
    dst = mkdir(ns, "dst")
    sub = mkdir(ns, "sub", src.ino)
    mkfile(ns, "f", sub.ino)
    before_src, before_dst = ns.getattr(src.ino), ns.getattr(dst.ino)
    ns.rename(src.ino, "sub", dst.ino, "moved")
    assert ns.resolve_path("/dst/moved/f").type.name == "REGULAR"
    assert ns.getattr(src.ino).nlink == 2 and ns.getattr(dst.ino).nlink == 3
    assert ns.lookup(sub.ino, "..").ino == dst.ino
    assert ns.getattr(src.ino).mtime_ns > before_src.mtime_ns
    assert ns.getattr(dst.ino).mtime_ns > before_dst.mtime_ns


def test_rename_missing_source_is_enoent(ns: Namespace) -> None:
    mkdir(ns, "d")
    with pytest.raises(NotFound):
        ns.rename(ROOT_INO, "nope", ROOT_INO, "x")
    with pytest.raises(NotFound):
        ns.rename(ROOT_INO, "d", 999, "x")


def test_rename_onto_itself_is_a_noop(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    assert ns.rename(ROOT_INO, "f", ROOT_INO, "f") == RenameResult()
    assert ns.rename(ROOT_INO, "f", ROOT_INO, "f", RENAME_EXCHANGE) == RenameResult()
    with pytest.raises(AlreadyExists):
        ns.rename(ROOT_INO, "f", ROOT_INO, "f", RENAME_NOREPLACE)
    ns.link(f.ino, ROOT_INO, "g")      # two names of one inode: POSIX says nothing happens
    assert ns.rename(ROOT_INO, "f", ROOT_INO, "g") == RenameResult()
    assert names(ns, ROOT_INO) == ["f", "g"]


def test_file_replaces_file_and_frees_it(ns: Namespace) -> None:
    a = mkfile(ns, "a")
    b = mkfile(ns, "b")
    result = ns.rename(ROOT_INO, "a", ROOT_INO, "b")
    assert result == RenameResult(b.ino, 0)
    assert ns.lookup(ROOT_INO, "b").ino == a.ino
    with pytest.raises(NotFound):
        ns.getattr(b.ino)


def test_replaced_file_with_other_links_survives(ns: Namespace) -> None:
    mkfile(ns, "a")
    b = mkfile(ns, "b")
    d = mkdir(ns, "d")
    ns.link(b.ino, d.ino, "b2")
    result = ns.rename(ROOT_INO, "a", ROOT_INO, "b")
    assert result == RenameResult(b.ino, 1)
    assert ns.getattr(b.ino).nlink == 1
    assert ns.lookup(d.ino, "b2").ino == b.ino


def test_dir_replaces_empty_dir(ns: Namespace) -> None:
    a = mkdir(ns, "a")
    b = mkdir(ns, "b")
    parent = mkdir(ns, "p")
    mkdir(ns, "c", parent.ino)
    assert ns.getattr(ROOT_INO).nlink == 5
    assert ns.rename(ROOT_INO, "a", ROOT_INO, "b") == RenameResult(b.ino, 0)
    assert ns.getattr(ROOT_INO).nlink == 4
    assert ns.lookup(ROOT_INO, "b").ino == a.ino
    # across directories: the replaced dir's link leaves p, the moved one arrives
    ns.rename(ROOT_INO, "b", parent.ino, "c")
    assert ns.getattr(parent.ino).nlink == 3
    assert ns.getattr(ROOT_INO).nlink == 3


def test_replacement_type_rules(ns: Namespace) -> None:
    mkfile(ns, "f")
    mkdir(ns, "d")
    full = mkdir(ns, "full")
    mkfile(ns, "x", full.ino)
    mkdir(ns, "e")
    with pytest.raises(IsADirectory):
        ns.rename(ROOT_INO, "f", ROOT_INO, "d")          # file over dir
    with pytest.raises(NotADirectory):
        ns.rename(ROOT_INO, "d", ROOT_INO, "f")          # dir over file
    with pytest.raises(DirectoryNotEmpty) as exc:
        ns.rename(ROOT_INO, "e", ROOT_INO, "full")       # dir over non-empty dir
    assert exc.value.errno == errno.ENOTEMPTY
    assert names(ns, ROOT_INO) == ["d", "e", "f", "full"]
    assert names(ns, full.ino) == ["x"]


def test_moving_a_directory_into_its_own_subtree_is_einval(ns: Namespace) -> None:
    a = mkdir(ns, "a")
    b = mkdir(ns, "b", a.ino)
    c = mkdir(ns, "c", b.ino)
    for target in (a.ino, b.ino, c.ino):
        with pytest.raises(InvalidArgument):
            ns.rename(ROOT_INO, "a", target, "x")
    ns.rename(b.ino, "c", ROOT_INO, "c")                 # moving up is fine
    assert ns.getattr(ROOT_INO).nlink == 4


def test_noreplace(ns: Namespace) -> None:
    mkfile(ns, "a")
    mkfile(ns, "b")
    with pytest.raises(AlreadyExists):
        ns.rename(ROOT_INO, "a", ROOT_INO, "b", RENAME_NOREPLACE)
    ns.rename(ROOT_INO, "a", ROOT_INO, "c", RENAME_NOREPLACE)
    assert names(ns, ROOT_INO) == ["b", "c"]


def test_exchange_swaps_two_names(ns: Namespace) -> None:
    d1 = mkdir(ns, "d1")
    d2 = mkdir(ns, "d2")
    f = mkfile(ns, "f", d1.ino)
    sub = mkdir(ns, "sub", d2.ino)
    assert ns.rename(d1.ino, "f", d2.ino, "sub", RENAME_EXCHANGE) == RenameResult()
    assert ns.lookup(d1.ino, "f").ino == sub.ino
    assert ns.lookup(d2.ino, "sub").ino == f.ino
    # the directory moved from d2 to d1: link counts follow
    assert ns.getattr(d1.ino).nlink == 3 and ns.getattr(d2.ino).nlink == 2
    assert ns.lookup(sub.ino, "..").ino == d1.ino


def test_exchange_needs_an_existing_target(ns: Namespace) -> None:
    mkfile(ns, "a")
    with pytest.raises(NotFound):
        ns.rename(ROOT_INO, "a", ROOT_INO, "missing", RENAME_EXCHANGE)


def test_exchange_refuses_a_loop(ns: Namespace) -> None:
    a = mkdir(ns, "a")
    mkdir(ns, "b", a.ino)
    with pytest.raises(InvalidArgument):
        ns.rename(ROOT_INO, "a", a.ino, "b", RENAME_EXCHANGE)


def test_bad_flags(ns: Namespace) -> None:
    mkfile(ns, "a")
    mkfile(ns, "b")
    with pytest.raises(InvalidArgument):
        ns.rename(ROOT_INO, "a", ROOT_INO, "b", RENAME_NOREPLACE | RENAME_EXCHANGE)
    with pytest.raises(InvalidArgument):
        ns.rename(ROOT_INO, "a", ROOT_INO, "b", 8)
    with pytest.raises(InvalidArgument):
        ns.rename(ROOT_INO, "a", ROOT_INO, "b/c")


def test_rename_into_a_file_parent_is_enotdir(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    mkfile(ns, "g")
    with pytest.raises(NotADirectory):
        ns.rename(ROOT_INO, "g", f.ino, "x")


def test_failed_rename_changes_nothing(ns: Namespace) -> None:
    full = mkdir(ns, "full")
    mkfile(ns, "x", full.ino)
    mkdir(ns, "e")
    before = [(e.name, e.attr) for e in ns.readdir(ROOT_INO)[0]]
    with pytest.raises(DirectoryNotEmpty):
        ns.rename(ROOT_INO, "e", ROOT_INO, "full")
    assert [(e.name, e.attr) for e in ns.readdir(ROOT_INO)[0]] == before


def test_policy_follows_a_file_moved_into_another_directory(ns: Namespace) -> None:
    from curvine_py.master.types import Policy, StorageClass

    cache = mkdir(ns, "cache")
    ns.set_policy("/cache", Policy(StorageClass.CACHE))
    f = mkfile(ns, "f")
    assert ns.effective_policy(f.ino).storage_class == StorageClass.DURABLE
    ns.rename(ROOT_INO, "f", cache.ino, "f")
    assert ns.effective_policy(f.ino).storage_class == StorageClass.CACHE
