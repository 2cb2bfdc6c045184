"""Directory quotas in the master store: usage counted over the subtree by every mutation, EDQUOT
(QuotaExceeded) on growth past a limit with nothing half-done, statfs bounded by the nearest quota,
the schema migration that added them. Every test ends with fsck, which recounts every quota."""
from __future__ import annotations

import errno
import pathlib

import pytest

from curvine_py.core.errors import CurvineError, InvalidArgument, NotADirectory, NotFound, QuotaExceeded
from curvine_py.master.namespace import SCHEMA_VERSION, Namespace
from curvine_py.master.store.quotas import quota_statfs
from curvine_py.master.types import ROOT_INO, BlockInfo, FileType, SetAttrChanges, StatFs
from tests.unit.test_master_support import FakeClock, MiB, mkdir, mkfile, open_store, raw_execute, worker

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

BS = 4 * MiB
W = [worker("w1"), worker("w2")]


def commit(ns: Namespace, ino: int, size: int) -> None:
    """Writes `size` bytes into a fresh file: one block per BS, then the commit."""
    blocks = []
    for index in range(-(-size // BS)):
        grant = ns.add_block(ino, index, "", W)
        blocks.append(BlockInfo(index, grant.block_id, min(BS, size - index * BS), 7, grant.worker_ids))
    ns.commit_file(ino, size, blocks)


def used(ns: Namespace, path: str) -> tuple[int, int]:
    q = ns.get_quota(path)
    return q.used_bytes, q.used_inodes


def test_set_and_get_quota_count_the_existing_subtree(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    sub = mkdir(ns, "sub", d.ino)
    commit(ns, mkfile(ns, "f", sub.ino).ino, 5 * MiB)
    ns.create(d.ino, "l", FileType.SYMLINK, symlink_target="/elsewhere")
    q = ns.set_quota("/d", 10 * MiB, 100)
    assert (q.path, q.max_bytes, q.max_inodes, q.used_bytes, q.used_inodes) == ("/d", 10 * MiB, 100, 5 * MiB, 3)
    assert ns.get_quota("/d") == q
    assert [x.path for x in ns.list_quotas()] == ["/d"]
    # no quota: limits 0, the usage counted on demand
    assert (ns.get_quota("/d/sub").max_bytes, used(ns, "/d/sub")) == (0, (5 * MiB, 1))
    # both limits 0 removes it
    ns.set_quota("/d", 0, 0)
    assert ns.list_quotas() == []


def test_bad_quota_requests(ns: Namespace) -> None:
    mkfile(ns, "f")
    with pytest.raises(NotADirectory):
        ns.set_quota("/f", 1, 1)
    with pytest.raises(NotFound):
        ns.set_quota("/missing", 1, 1)
    with pytest.raises(InvalidArgument):
        ns.set_quota("/", -1, 0)
    with pytest.raises(InvalidArgument):
        ns.set_quota("/", 1 << 63, 0)
    assert ns.list_quotas() == []


def test_inode_limit_refuses_creates_and_links_with_edquot(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_quota("/d", 0, 2)
    mkfile(ns, "a", d.ino)
    mkdir(ns, "b", d.ino)
    with pytest.raises(QuotaExceeded) as exc:
        mkfile(ns, "c", d.ino)
    assert exc.value.errno == errno.EDQUOT
    assert "inode quota" in exc.value.message
    outside = mkfile(ns, "outside")
    with pytest.raises(QuotaExceeded):
        ns.link(outside.ino, d.ino, "link")
    with pytest.raises(QuotaExceeded):     # a nested directory counts against its ancestors' quotas
        mkfile(ns, "deep", ns.lookup(d.ino, "b").ino)
    assert [e.name for e in ns.readdir(d.ino)[0]] == ["a", "b"]       # nothing half-created
    assert ns.getattr(outside.ino).nlink == 1
    assert used(ns, "/d") == (0, 2)
    ns.unlink(d.ino, "a")                  # room again
    mkfile(ns, "c", d.ino)
    assert used(ns, "/d") == (0, 2)


def test_byte_limit_on_commit_keeps_the_committed_size(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_quota("/d", 6 * MiB, 0)
    f = mkfile(ns, "f", d.ino)
    commit(ns, f.ino, 5 * MiB)
    grant = ns.add_block(f.ino, 1, "", W)    # the block starts at 4 MiB: within the quota
    with pytest.raises(QuotaExceeded):
        ns.commit_file(f.ino, 7 * MiB, [BlockInfo(1, grant.block_id, 3 * MiB, 7, grant.worker_ids)])
    assert ns.getattr(f.ino).size == 5 * MiB
    assert [b.length for b in ns.get_blocks(f.ino).blocks] == [4 * MiB, MiB]
    assert used(ns, "/d") == (5 * MiB, 1)
    # AddBlock of a block that starts past the limit is refused at once
    with pytest.raises(QuotaExceeded):
        ns.add_block(f.ino, 2, "", W)
    # raising the quota lets the same write succeed
    ns.set_quota("/d", 8 * MiB, 0)
    ns.commit_file(f.ino, 7 * MiB, [BlockInfo(1, grant.block_id, 3 * MiB, 7, grant.worker_ids)])
    assert used(ns, "/d") == (7 * MiB, 1)


def test_truncate_and_o_trunc_move_the_usage(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_quota("/d", 10 * MiB, 0)
    f = mkfile(ns, "f", d.ino)
    commit(ns, f.ino, 8 * MiB)
    with pytest.raises(QuotaExceeded):      # a sparse grow is counted by its size too
        ns.setattr(f.ino, SetAttrChanges(size=11 * MiB))
    ns.setattr(f.ino, SetAttrChanges(size=MiB))
    assert used(ns, "/d") == (MiB, 1)
    ns.create(d.ino, "f", FileType.REGULAR, exclusive=False, truncate=True)
    assert used(ns, "/d") == (0, 1)


def test_rename_moves_usage_between_quotas_and_is_judged_by_its_net_effect(ns: Namespace) -> None:
    a, b = mkdir(ns, "a"), mkdir(ns, "b")
    ns.set_quota("/a", 10 * MiB, 0)
    ns.set_quota("/b", 6 * MiB, 0)
    sub = mkdir(ns, "sub", a.ino)
    commit(ns, mkfile(ns, "big", sub.ino).ino, 8 * MiB)
    with pytest.raises(QuotaExceeded):      # the directory brings its whole subtree
        ns.rename(a.ino, "sub", b.ino, "sub")
    assert ns.lookup(a.ino, "sub").ino == sub.ino
    commit(ns, mkfile(ns, "small", a.ino).ino, MiB)
    commit(ns, mkfile(ns, "old", b.ino).ino, 5 * MiB)
    # replacing b/old (5 MiB) with a/small (1 MiB): b goes down, so it passes
    ns.rename(a.ino, "small", b.ino, "old")
    assert used(ns, "/a") == (8 * MiB, 2)
    assert used(ns, "/b") == (MiB, 1)
    # moving a quota'd directory keeps its own counters and charges its new ancestors
    c = mkdir(ns, "c")
    ns.set_quota("/c", 0, 10)
    ns.rename(ROOT_INO, "b", c.ino, "b")
    assert used(ns, "/c") == (MiB, 2)
    assert used(ns, "/c/b") == (MiB, 1)
    # exchange swaps what each side holds
    ns.rename(c.ino, "b", ROOT_INO, "a", flags=2)
    assert used(ns, "/c") == (8 * MiB, 3)      # a (now /c/b) and its sub and big


def test_hard_links_count_at_each_name_and_unlink_returns_it(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_quota("/d", 100 * MiB, 100)
    f = mkfile(ns, "f", d.ino)
    commit(ns, f.ino, 3 * MiB)
    ns.link(f.ino, d.ino, "g")
    assert used(ns, "/d") == (6 * MiB, 2)
    ns.unlink(d.ino, "f", keep_orphan=False)
    assert used(ns, "/d") == (3 * MiB, 1)
    ns.unlink(d.ino, "g", keep_orphan=True)   # open but nameless: counts nowhere
    assert used(ns, "/d") == (0, 0)
    ns.commit_file(f.ino, 4 * MiB)
    assert used(ns, "/d") == (0, 0)


def test_removing_the_directory_removes_its_quota(ns: Namespace) -> None:
    mkdir(ns, "d")
    ns.set_quota("/d", MiB, 1)
    ns.unlink(ROOT_INO, "d", directory=True)
    assert ns.list_quotas() == []


def test_statfs_of_a_directory_reports_its_nearest_quota(ns: Namespace) -> None:
    cluster = StatFs(capacity=100 * MiB, used=40 * MiB, available=60 * MiB, files=9, block_size=BS)
    d = mkdir(ns, "d")
    sub = mkdir(ns, "sub", d.ino)
    assert ns.nearest_quota(sub.ino) is None
    assert quota_statfs(cluster, None) == cluster
    ns.set_quota("/d", 10 * MiB, 50)
    commit(ns, mkfile(ns, "f", sub.ino).ino, 3 * MiB)
    quota = ns.nearest_quota(sub.ino)
    assert quota is not None and quota.path == "/d"
    assert quota_statfs(cluster, quota) == StatFs(capacity=10 * MiB, used=3 * MiB, available=7 * MiB,
                                                  files=2, block_size=BS, max_files=50)
    # the cluster's free space still bounds what is available
    tight = StatFs(capacity=100 * MiB, used=98 * MiB, available=2 * MiB, files=9, block_size=BS)
    assert quota_statfs(tight, quota).available == 2 * MiB
    # an inode-only quota keeps the cluster's bytes
    ns.set_quota("/d", 0, 50)
    only_inodes = quota_statfs(cluster, ns.nearest_quota(sub.ino))
    assert (only_inodes.capacity, only_inodes.used, only_inodes.max_files) == (100 * MiB, 40 * MiB, 50)
    # a file is bounded by its directory's quota (df of any path)
    assert ns.nearest_quota(ns.lookup(sub.ino, "f").ino) == ns.nearest_quota(sub.ino)
    with pytest.raises(NotFound):
        ns.nearest_quota(987_654)


def test_quotas_survive_reopening(tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    d = mkdir(ns, "d")
    ns.set_quota("/d", 5 * MiB, 7)
    mkfile(ns, "f", d.ino)
    ns.close()
    again = open_store(tmp_path, clock)
    q = again.get_quota("/d")
    assert (q.max_bytes, q.max_inodes, q.used_inodes) == (5 * MiB, 7, 1)
    assert again.check() == []
    again.close()


def test_a_version_1_database_is_migrated(tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    mkdir(ns, "d")
    ns.close()
    raw_execute(tmp_path, "DROP TABLE quotas",      # make it what a version-1 master left behind
                "ALTER TABLE inodes DROP COLUMN stored", "UPDATE meta SET value='1' WHERE key='schema_version'")
    again = open_store(tmp_path, clock)
    assert again.schema_version() == SCHEMA_VERSION == 4
    again.set_quota("/d", MiB, 0)
    assert again.check() == []
    again.close()


def test_a_newer_database_is_refused(tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    ns.close()
    raw_execute(tmp_path, "UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(CurvineError, match="newer"):
        open_store(tmp_path, clock)


def test_fsck_finds_wrong_counters(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_quota("/d", 0, 10)
    mkfile(ns, "f", d.ino)
    ns._db.execute("UPDATE quotas SET used_inodes = 5")
    assert ns.check() == ["quota of /d: counts 0 bytes 5 inodes, the subtree holds 0 bytes 1 inodes"]
    ns._db.execute("UPDATE quotas SET used_inodes = 1")
