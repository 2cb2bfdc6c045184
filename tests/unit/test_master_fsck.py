"""The namespace consistency check (store/fsck.py): each kind of damage a bug or a hand edit could
leave in the database is found and named, on SQLite and on PostgreSQL; a sound store gives []."""
from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest

from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, FileType
from tests.unit.test_master_support import FakeClock, mkdir, mkfile, open_store

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

GHOST = 999_999     # an inode number no test creates


@pytest.fixture
def damaged(tmp_path: pathlib.Path, clock: FakeClock) -> Iterator[Namespace]:
    """A store the test damages on purpose (so no fsck-clean assertion at the end)."""
    store = open_store(tmp_path, clock)
    yield store
    store.close()


def _dentry_to_nowhere(ns: Namespace) -> str:
    ns._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, 'ghost', ?)", (ROOT_INO, GHOST))
    return f"dentry points to missing inode {GHOST}"


def _dentry_under_a_file(ns: Namespace) -> str:
    f = mkfile(ns, "f")
    g = mkfile(ns, "g")
    ns._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, 'inside', ?)", (f.ino, g.ino))
    ns._db.execute("UPDATE inodes SET nlink = 2 WHERE ino = ?", (g.ino,))
    return f"dentry under missing or non-directory inode {f.ino}"


def _file_nlink_off(ns: Namespace) -> str:
    f = mkfile(ns, "f")
    ns._db.execute("UPDATE inodes SET nlink = 3 WHERE ino = ?", (f.ino,))
    return f"inode {f.ino}: nlink 3 does not match its names"


def _directory_nlink_off(ns: Namespace) -> str:
    d = mkdir(ns, "d")
    ns._db.execute("UPDATE inodes SET nlink = 5 WHERE ino = ?", (d.ino,))
    return f"directory {d.ino}: nlink 5 does not match its subdirectories"


def _directory_with_two_names(ns: Namespace) -> str:
    d = mkdir(ns, "d")
    e = mkdir(ns, "e")
    ns._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, 'again', ?)", (e.ino, d.ino))
    ns._db.execute("UPDATE inodes SET nlink = 3 WHERE ino = ?", (e.ino,))
    return f"directory {d.ino} has 2 names"


def _unreachable_inode(ns: Namespace) -> str:
    f = mkfile(ns, "f")
    ns._db.execute("DELETE FROM dentries WHERE ino = ?", (f.ino,))
    ns._db.execute("UPDATE inodes SET nlink = 0 WHERE ino = ?", (f.ino,))
    return f"inode {f.ino} is unreachable and not an orphan"


def _directory_parent_column_off(ns: Namespace) -> str:
    d = mkdir(ns, "d")
    e = mkdir(ns, "e", d.ino)
    ns._db.execute("UPDATE inodes SET parent = ? WHERE ino = ?", (ROOT_INO, e.ino))
    return f"directory {e.ino}: parent column does not match its dentry"


def _block_of_a_missing_inode(ns: Namespace) -> str:
    ns._db.execute("INSERT INTO blocks (ino, idx, block_id, length, checksum) VALUES (?, 0, 4242, 0, 0)", (GHOST,))
    return "block 4242 of a missing inode"


def _location_of_an_unknown_block(ns: Namespace) -> str:
    ns._db.execute("INSERT INTO locations (block_id, worker_id) VALUES (4343, 'w1')")
    return "location of unknown block 4343"


def _xattrs_of_a_missing_inode(ns: Namespace) -> str:
    ns._db.execute("INSERT INTO xattrs (ino, name, value) VALUES (?, 'user.k', ?)", (GHOST, b"v"))
    return f"xattrs of missing inode {GHOST}"


def _quota_on_a_file(ns: Namespace) -> str:
    d = mkdir(ns, "d")
    ns.set_quota("/d", 0, 10)
    f = mkfile(ns, "f")
    ns._db.execute("UPDATE quotas SET ino = ? WHERE ino = ?", (f.ino, d.ino))
    return f"quota on missing or non-directory inode {f.ino}"


def _stored_bytes_off(ns: Namespace) -> str:
    f = mkfile(ns, "f")
    ns._db.execute("UPDATE inodes SET stored = 7 WHERE ino = ?", (f.ino,))
    return f"inode {f.ino}: 7 stored bytes recorded, its blocks hold 0"


DAMAGE: list[Callable[[Namespace], str]] = [
    _dentry_to_nowhere, _dentry_under_a_file, _file_nlink_off, _directory_nlink_off, _directory_with_two_names,
    _unreachable_inode, _directory_parent_column_off, _block_of_a_missing_inode, _location_of_an_unknown_block,
    _xattrs_of_a_missing_inode, _quota_on_a_file, _stored_bytes_off,
]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_each_kind_of_damage_is_found_and_named(damaged: Namespace, damage: Callable[[Namespace], str]) -> None:
    assert damaged.check() == []
    expected = damage(damaged)
    assert expected in damaged.check()


def test_a_sound_tree_of_every_kind_checks_clean(damaged: Namespace) -> None:
    d = mkdir(damaged, "d")
    mkdir(damaged, "sub", d.ino)
    f = mkfile(damaged, "f", d.ino)
    damaged.link(f.ino, ROOT_INO, "hard")
    damaged.set_quota("/d", 1 << 20, 100)
    assert damaged.getattr(f.ino).type == FileType.REGULAR
    assert damaged.check() == []
