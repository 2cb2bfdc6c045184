"""File data in the master store: per-directory policy, block allocation and placement, commit
(close-to-open), sparse truncate, freeing and pending deletions."""
from __future__ import annotations

import collections
import pathlib

import pytest

from curvine_py.core.errors import InvalidArgument, IsADirectory, NotADirectory, NotFound, Unavailable
from curvine_py.core.hashing import Node, Rendezvous
from curvine_py.master import placement
from curvine_py.master.namespace import SCHEMA_VERSION, Namespace
from curvine_py.master.types import (
    ROOT_INO,
    BlockInfo,
    FileType,
    Policy,
    SetAttrChanges,
    StorageClass,
    WorkerInfo,
)
from curvine_py.rpc import convert
from tests.unit.test_master_support import FakeClock, MiB, mkdir, mkfile, open_store, raw_execute, worker

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

BS = 4 * MiB   # the test store's default block size
W3 = [worker("w1"), worker("w2"), worker("w3")]


def write_block(ns: Namespace, ino: int, index: int, length: int = BS, live: list[WorkerInfo] = W3,
                checksum: int = 7) -> BlockInfo:
    grant = ns.add_block(ino, index, "", live)
    return BlockInfo(index, grant.block_id, length, checksum, grant.worker_ids)


def all_deletions(ns: Namespace) -> dict[str, list[int]]:
    return {w.worker_id: ns.pending_deletions(w.worker_id) for w in W3 if ns.pending_deletions(w.worker_id)}


# ---------------------------------------------------------------------------------------------- policy


def test_root_default_policy_is_durable(ns: Namespace) -> None:
    at = ns.get_policy("/")
    assert at.path == "/"
    assert at.policy == Policy(StorageClass.DURABLE, 0, 0, BS, "hash", False)


def test_policy_is_inherited_from_the_nearest_ancestor(ns: Namespace) -> None:
    kv = mkdir(ns, "kv")
    sub = mkdir(ns, "sub", kv.ino)
    deep = mkdir(ns, "deep", sub.ino)
    f = mkfile(ns, "f", deep.ino)
    ns.set_policy("/kv", Policy(StorageClass.CACHE, ttl_ms=60_000, placement="local"))
    at = ns.get_policy("/kv/sub/deep")
    assert at.path == "/kv"
    assert (at.policy.storage_class, at.policy.ttl_ms, at.policy.placement) == (StorageClass.CACHE, 60_000, "local")
    assert ns.get_policy("/kv/sub/deep/f").path == "/kv"           # a file's policy is its directory's
    assert ns.effective_policy(f.ino).storage_class == StorageClass.CACHE
    # a nearer policy without a class: its fields win, the class still comes from above
    ns.set_policy("/kv/sub", Policy(replicas=3))
    at = ns.get_policy("/kv/sub/deep")
    assert at.path == "/kv/sub"
    assert (at.policy.storage_class, at.policy.replicas, at.policy.ttl_ms) == (StorageClass.CACHE, 3, 0)
    # clearing restores inheritance
    ns.set_policy("/kv/sub", Policy())
    assert ns.get_policy("/kv/sub/deep").path == "/kv"
    assert ns.get_policy("/").policy.storage_class == StorageClass.DURABLE


def test_set_policy_rules(ns: Namespace) -> None:
    mkfile(ns, "f")
    mkdir(ns, "d")
    with pytest.raises(NotADirectory):
        ns.set_policy("/f", Policy(StorageClass.CACHE))
    with pytest.raises(NotFound):
        ns.set_policy("/missing", Policy(StorageClass.CACHE))
    for bad in (Policy(placement="nearby"), Policy(replicas=99), Policy(block_size=1000),
                Policy(block_size=4096 * 3 + 1)):
        with pytest.raises(InvalidArgument):
            ns.set_policy("/d", bad)
    reply = ns.set_policy("/d", Policy(StorageClass.CACHE, replicas=2, block_size=MiB, compress=True))
    assert reply.path == "/d"
    assert reply.policy == Policy(StorageClass.CACHE, 2, 0, MiB, "hash", True)


def test_clearing_the_root_policy_keeps_the_configured_class(tmp_path: pathlib.Path) -> None:
    ns = open_store(tmp_path, FakeClock(), root_class=StorageClass.CACHE)
    assert ns.get_policy("/").policy.storage_class == StorageClass.CACHE
    ns.set_policy("/", Policy(StorageClass.DURABLE))
    assert ns.get_policy("/").policy.storage_class == StorageClass.DURABLE
    ns.set_policy("/", Policy())
    assert ns.get_policy("/").policy.storage_class == StorageClass.CACHE
    ns.close()


def test_policy_survives_a_rename_of_its_directory(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    mkdir(ns, "inner", d.ino)
    ns.set_policy("/d", Policy(StorageClass.CACHE))
    ns.rename(ROOT_INO, "d", ROOT_INO, "e")
    assert ns.get_policy("/e/inner").path == "/e"


def test_file_block_size_is_fixed_at_creation(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_policy("/d", Policy(block_size=MiB))
    f = mkfile(ns, "f", d.ino)
    assert f.block_size == MiB
    ns.set_policy("/d", Policy(block_size=2 * MiB))
    assert ns.getattr(f.ino).block_size == MiB
    assert ns.add_block(f.ino, 0, "", W3).block_size == MiB
    assert mkfile(ns, "g", d.ino).block_size == 2 * MiB


# ---------------------------------------------------------------------------------------------- allocation


def test_add_block_needs_live_workers(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    with pytest.raises(Unavailable):
        ns.add_block(f.ino, 0, "", [])


def test_add_block_only_for_regular_files(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    link = ns.create(ROOT_INO, "l", FileType.SYMLINK, 0o777, symlink_target="x")
    with pytest.raises(IsADirectory):
        ns.add_block(d.ino, 0, "", W3)
    with pytest.raises(InvalidArgument):
        ns.add_block(link.ino, 0, "", W3)
    with pytest.raises(NotFound):
        ns.add_block(999, 0, "", W3)


def test_block_ids_are_unique_and_survive_restart(tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    f = mkfile(ns, "f")
    ids = [ns.add_block(f.ino, i, "", W3).block_id for i in range(5)]
    ns.close()
    again = open_store(tmp_path, clock)
    later = again.add_block(f.ino, 5, "", W3).block_id
    assert len(set(ids)) == 5 and later > max(ids)
    again.close()


def test_replica_counts_by_class(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    assert len(ns.add_block(f.ino, 0, "", W3).worker_ids) == 2        # durable: min(2, live)
    assert len(ns.add_block(f.ino, 0, "", W3[:1]).worker_ids) == 1
    cache = mkdir(ns, "cache")
    ns.set_policy("/cache", Policy(StorageClass.CACHE))
    g = mkfile(ns, "g", cache.ino)
    grant = ns.add_block(g.ino, 0, "", W3)
    assert len(grant.worker_ids) == 1 and grant.storage_class == StorageClass.CACHE
    ns.set_policy("/cache", Policy(StorageClass.CACHE, replicas=3, ttl_ms=5000))
    grant = ns.add_block(g.ino, 0, "", W3[:2])
    assert len(grant.worker_ids) == 2 and len(set(grant.worker_ids)) == 2   # capped by live workers
    assert grant.ttl_ms == 5000


def test_hash_placement_is_weighted_rendezvous_on_the_block_id(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    live = [worker("a", capacity=100 << 30), worker("b", capacity=300 << 30), worker("c")]
    ring = Rendezvous([Node("a", 100.0), Node("b", 300.0), Node("c", 1.0)])
    for index in range(20):
        grant = ns.add_block(f.ino, index, "", live)
        assert list(grant.worker_ids) == ring.owners(str(grant.block_id), 2)


def test_local_placement_prefers_the_writers_node(ns: Namespace) -> None:
    d = mkdir(ns, "local")
    ns.set_policy("/local", Policy(placement="local"))
    f = mkfile(ns, "f", d.ino)
    live = [worker("a", node="n1"), worker("b", node="n2"), worker("c", node="n3")]
    for index in range(10):
        grant = ns.add_block(f.ino, index, "n2", live)
        assert grant.worker_ids[0] == "b" and len(grant.worker_ids) == 2
    unknown = ns.add_block(f.ino, 0, "elsewhere", live)            # no worker on that node: hash
    ring = Rendezvous([Node(w.worker_id, 1.0) for w in live])
    assert list(unknown.worker_ids) == ring.owners(str(unknown.block_id), 2)


def test_placement_weights_follow_capacity() -> None:
    live = [worker("small", capacity=1 << 40), worker("big", capacity=3 << 40)]
    counts = collections.Counter(placement.choose_workers(i, live, 1, "hash", "")[0] for i in range(4000))
    assert 2.4 < counts["big"] / counts["small"] < 3.7


def test_replica_count_rules() -> None:
    assert placement.replica_count(StorageClass.DURABLE, 0, 5, 2) == 2
    assert placement.replica_count(StorageClass.DURABLE, 0, 1, 2) == 1
    assert placement.replica_count(StorageClass.CACHE, 0, 5, 2) == 1
    assert placement.replica_count(StorageClass.CACHE, 4, 3, 2) == 3
    assert placement.replica_count(StorageClass.DURABLE, 0, 0, 2) == 0


# ---------------------------------------------------------------------------------------------- commit


def test_commit_makes_blocks_and_size_visible(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    b0 = write_block(ns, f.ino, 0)
    b1 = write_block(ns, f.ino, 1, length=100, checksum=(1 << 64) - 1)
    assert ns.get_blocks(f.ino).blocks == ()                      # nothing visible before commit
    attr = ns.commit_file(f.ino, BS + 100, [b0, b1])
    assert attr.size == BS + 100 and attr.mtime_ns > f.mtime_ns
    got = ns.get_blocks(f.ino)
    assert [(b.index, b.block_id, b.length) for b in got.blocks] == [(0, b0.block_id, BS), (1, b1.block_id, 100)]
    assert got.blocks[1].checksum == (1 << 64) - 1                 # uint64 round trip
    assert set(got.blocks[0].worker_ids) == set(b0.worker_ids)
    assert got.policy.storage_class == StorageClass.DURABLE
    assert ns.counts().blocks == 2


def test_commit_without_mtime_keeps_mtime(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    attr = ns.commit_file(f.ino, 10, [], set_mtime=False)
    assert attr.mtime_ns == f.mtime_ns and attr.size == 10


def test_commit_records_the_workers_that_acknowledged(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    grant = ns.add_block(f.ino, 0, "", W3)
    ns.commit_file(f.ino, 10, [BlockInfo(0, grant.block_id, 10, 1, (grant.worker_ids[0],))])
    assert ns.get_blocks(f.ino).blocks[0].worker_ids == (grant.worker_ids[0],)


def test_recommit_replaces_the_block_and_queues_the_old_one(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    old = write_block(ns, f.ino, 0, length=10)
    ns.commit_file(f.ino, 10, [old])
    new = write_block(ns, f.ino, 0, length=20)
    ns.commit_file(f.ino, 20, [new])
    assert [b.block_id for b in ns.get_blocks(f.ino).blocks] == [new.block_id]
    assert all_deletions(ns) == {w: [old.block_id] for w in old.worker_ids}


def test_commit_is_idempotent_for_a_retried_call(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    b = write_block(ns, f.ino, 0, length=10)
    ns.commit_file(f.ino, 10, [b])
    ns.commit_file(f.ino, 10, [b])
    assert [x.block_id for x in ns.get_blocks(f.ino).blocks] == [b.block_id]
    assert all_deletions(ns) == {}


def test_commit_rejects_blocks_not_allocated_for_this_file(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    g = mkfile(ns, "g")
    other = write_block(ns, g.ino, 0, length=10)
    with pytest.raises(InvalidArgument):
        ns.commit_file(f.ino, 10, [other])
    with pytest.raises(InvalidArgument):
        ns.commit_file(f.ino, 10, [BlockInfo(0, 987654, 10)])
    wrong_index = write_block(ns, f.ino, 0, length=10)
    with pytest.raises(InvalidArgument):
        ns.commit_file(f.ino, 10, [BlockInfo(1, wrong_index.block_id, 10)])
    too_long = write_block(ns, f.ino, 1, length=BS + 1)
    with pytest.raises(InvalidArgument):
        ns.commit_file(f.ino, BS * 2, [too_long])
    with pytest.raises(IsADirectory):
        ns.commit_file(ROOT_INO, 0, [])
    assert ns.get_blocks(f.ino).blocks == ()


def test_get_blocks_filters_locations_by_live_workers(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    grant = ns.add_block(f.ino, 0, "", W3)
    ns.commit_file(f.ino, 10, [BlockInfo(0, grant.block_id, 10, 1, grant.worker_ids)])
    alive = {grant.worker_ids[0]}
    assert ns.get_blocks(f.ino, alive).blocks[0].worker_ids == (grant.worker_ids[0],)
    assert ns.get_blocks(f.ino, set()).blocks[0].worker_ids == ()


# ---------------------------------------------------------------------------------------------- truncate


def test_truncate_drops_whole_blocks_and_shortens_the_straddling_one(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    blocks = [write_block(ns, f.ino, i) for i in range(3)]
    ns.commit_file(f.ino, 3 * BS, blocks)
    ns.setattr(f.ino, SetAttrChanges(size=BS + 10))
    got = ns.get_blocks(f.ino)
    assert [(b.index, b.length) for b in got.blocks] == [(0, BS), (1, 10)]
    assert got.blocks[1].checksum == 0                     # shortened: checksum unknown
    assert got.blocks[0].checksum == 7
    assert all_deletions(ns) == {w: [blocks[2].block_id] for w in blocks[2].worker_ids}
    ns.setattr(f.ino, SetAttrChanges(size=BS))             # exactly on a boundary
    assert [b.index for b in ns.get_blocks(f.ino).blocks] == [0]
    ns.setattr(f.ino, SetAttrChanges(size=5 * BS))          # extend: a hole, nothing allocated
    assert [b.index for b in ns.get_blocks(f.ino).blocks] == [0]
    assert ns.getattr(f.ino).size == 5 * BS
    ns.setattr(f.ino, SetAttrChanges(size=0))
    assert ns.get_blocks(f.ino).blocks == ()
    assert ns.counts().blocks == 0


def test_open_truncate_drops_blocks(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    b = write_block(ns, f.ino, 0, length=10)
    ns.commit_file(f.ino, 10, [b])
    ns.create(ROOT_INO, "f", FileType.REGULAR, 0o644, exclusive=False, truncate=True)
    assert ns.get_blocks(f.ino).blocks == ()
    assert all_deletions(ns) == {w: [b.block_id] for w in b.worker_ids}


def test_commit_of_a_smaller_size_drops_blocks_beyond_it(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    ns.commit_file(f.ino, 2 * BS, [write_block(ns, f.ino, 0), write_block(ns, f.ino, 1)])
    ns.commit_file(f.ino, 100, [])
    assert [(b.index, b.length) for b in ns.get_blocks(f.ino).blocks] == [(0, 100)]


# ---------------------------------------------------------------------------------------------- freeing


def test_unlink_frees_blocks_to_pending_deletions(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    blocks = [write_block(ns, f.ino, i) for i in range(4)]
    ns.commit_file(f.ino, 4 * BS, blocks)
    ns.unlink(ROOT_INO, "f")
    expected: dict[str, list[int]] = collections.defaultdict(list)
    for b in blocks:
        for w in b.worker_ids:
            expected[w].append(b.block_id)
    assert all_deletions(ns) == dict(expected)
    assert ns.counts().blocks == 0


def test_deletions_are_handed_out_once(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    b = write_block(ns, f.ino, 0, length=1)
    ns.commit_file(f.ino, 1, [b])
    ns.unlink(ROOT_INO, "f")
    first = b.worker_ids[0]
    assert ns.take_deletions(first) == [b.block_id]
    assert ns.take_deletions(first) == []
    assert ns.take_deletions(b.worker_ids[1]) == [b.block_id]


def test_uncommitted_blocks_are_freed_with_the_file(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    grant = ns.add_block(f.ino, 0, "", W3)
    ns.unlink(ROOT_INO, "f")
    assert all_deletions(ns) == {w: [grant.block_id] for w in grant.worker_ids}


def test_orphan_keeps_its_blocks_until_release(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    b = write_block(ns, f.ino, 0, length=10)
    ns.commit_file(f.ino, 10, [b])
    ns.unlink(ROOT_INO, "f", keep_orphan=True)
    assert [x.block_id for x in ns.get_blocks(f.ino).blocks] == [b.block_id]   # still readable
    assert all_deletions(ns) == {}
    ns.release_orphan(f.ino)
    assert all_deletions(ns) == {w: [b.block_id] for w in b.worker_ids}


def test_rename_over_a_file_frees_its_blocks(ns: Namespace) -> None:
    mkfile(ns, "a")
    victim = mkfile(ns, "b")
    b = write_block(ns, victim.ino, 0, length=10)
    ns.commit_file(victim.ino, 10, [b])
    ns.rename(ROOT_INO, "a", ROOT_INO, "b")
    assert all_deletions(ns) == {w: [b.block_id] for w in b.worker_ids}


def test_abandoned_allocations_expire(ns: Namespace, clock: FakeClock) -> None:
    f = mkfile(ns, "f")
    grant = ns.add_block(f.ino, 0, "", W3)
    assert ns.expire_open_blocks(60_000) == 0
    clock.ns += 61_000 * 1_000_000
    assert ns.expire_open_blocks(60_000) == 1
    assert all_deletions(ns) == {w: [grant.block_id] for w in grant.worker_ids}
    with pytest.raises(InvalidArgument):
        ns.commit_file(f.ino, 10, [BlockInfo(0, grant.block_id, 10)])


# ---------------------------------------------------------------------------------------------- totals


def test_statfs_and_counts(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    f = mkfile(ns, "f", d.ino)
    ns.commit_file(f.ino, 1, [write_block(ns, f.ino, 0, length=1)])
    live = [WorkerInfo("a", capacity=100, used=30, available=70), WorkerInfo("b", capacity=50, used=5,
                                                                               available=45)]
    s = ns.statfs(live)
    assert (s.capacity, s.used, s.available, s.files, s.block_size) == (150, 35, 115, 3, BS)
    c = ns.counts()
    assert (c.files, c.directories, c.blocks, c.inodes) == (1, 2, 1, 3)


def test_unlink_grace_keeps_a_nameless_file_readable_then_frees_it(tmp_path: pathlib.Path) -> None:
    """Readers on other nodes are unknown to the master: a file that lost its last name keeps its
    blocks for the grace (for handles that hold its block map), then expire_orphans frees it."""
    clock = FakeClock()
    ns = open_store(tmp_path, clock, unlink_grace_ms=5_000)
    f = mkfile(ns, "f")
    b = write_block(ns, f.ino, 0, length=1)
    ns.commit_file(f.ino, 1, [b])
    g = mkfile(ns, "g")
    ns.rename(ROOT_INO, "g", ROOT_INO, "f")          # replaces f: nameless now
    with pytest.raises(NotFound):
        ns.lookup(ROOT_INO, "g")
    with pytest.raises(NotFound):
        ns.getattr(f.ino)            # gone for new opens (the kernel then looks the name up again)
    with pytest.raises(NotFound):
        ns.get_blocks(f.ino)
    assert all_deletions(ns) == {}, "but no worker is told to delete its blocks yet"
    assert ns.counts().blocks == 1
    assert ns.expire_orphans() == 0
    clock.ns += 5_000_000_000
    assert ns.expire_orphans() == 1
    with pytest.raises(NotFound):
        ns.getattr(f.ino)
    assert sorted(all_deletions(ns)) == sorted(b.worker_ids)
    assert ns.lookup(ROOT_INO, "f").ino == g.ino
    assert ns.check() == []

    kept = mkfile(ns, "kept")                         # unlinked while open on the caller's mount
    ns.unlink(ROOT_INO, "kept", keep_orphan=True)
    clock.ns += 10_000_000_000
    assert ns.expire_orphans() == 0, "kept by its client: not on the grace clock"
    assert ns.getattr(kept.ino).nlink == 0, "readable by inode for the client that keeps it"
    ns.release_orphan(kept.ino)                       # its last close: the grace starts now
    clock.ns += 5_000_000_000
    assert ns.expire_orphans() == 1
    with pytest.raises(NotFound):
        ns.getattr(kept.ino)
    ns.close()


# ---------------------------------------------------------------------------------------------- open blocks

def open_block_ids(ns: Namespace, ino: int) -> list[int]:
    return [int(r[0]) for r in ns._db.execute("SELECT block_id FROM open_blocks WHERE ino=? ORDER BY block_id",
                                              (ino,))]


def test_abandoned_blocks_are_freed_at_once(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    g = mkfile(ns, "g")
    first = write_block(ns, f.ino, 0, length=10)
    second = write_block(ns, f.ino, 0, length=20)     # a rewrite before the commit supersedes `first`
    other = write_block(ns, g.ino, 0, length=10)
    ns.commit_file(f.ino, 20, [second])
    assert ns.abandon_blocks(f.ino, [first.block_id, second.block_id, other.block_id, 0, 987654]) == 1
    assert all_deletions(ns) == {w: [first.block_id] for w in first.worker_ids}
    assert open_block_ids(ns, g.ino) == [other.block_id]           # another file's block is not touched
    assert [b.block_id for b in ns.get_blocks(f.ino).blocks] == [second.block_id]   # committed: kept
    assert ns.abandon_blocks(f.ino, [first.block_id]) == 0         # a retried call is harmless


def test_rewrites_without_commit_keep_a_bounded_number_of_blocks(ns: Namespace) -> None:
    from curvine_py.master.store.blocks import MAX_OPEN_BLOCKS_PER_INDEX
    f = mkfile(ns, "f")
    grants = [write_block(ns, f.ino, 3, length=10) for _ in range(MAX_OPEN_BLOCKS_PER_INDEX + 5)]
    other_index = write_block(ns, f.ino, 4, length=10)
    kept = open_block_ids(ns, f.ino)
    assert kept == sorted([g.block_id for g in grants[-MAX_OPEN_BLOCKS_PER_INDEX:]] + [other_index.block_id])
    freed = {g.block_id for g in grants[:5]}
    assert set().union(*all_deletions(ns).values()) == freed       # freed on the workers chosen for them
    with pytest.raises(InvalidArgument):                           # a freed one is never committed
        ns.commit_file(f.ino, 3 * BS + 10, [grants[0]])
    ns.commit_file(f.ino, 3 * BS + 10, [grants[-1]])
    assert [b.block_id for b in ns.get_blocks(f.ino).blocks] == [grants[-1].block_id]


# ---------------------------------------------------------------------------------------------- stored bytes


def test_stored_bytes_follow_commits_rewrites_truncates_and_holes(ns: Namespace) -> None:
    f = mkfile(ns, "f")
    assert ns.getattr(f.ino).stored_bytes == 0
    bs = 4 * MiB
    ns.commit_file(f.ino, bs + 100, [write_block(ns, f.ino, 0, bs), write_block(ns, f.ino, 1, 100)])
    assert ns.getattr(f.ino).stored_bytes == bs + 100
    ns.commit_file(f.ino, bs + 100, [write_block(ns, f.ino, 1, 60)])   # a rewrite of block 1, shorter
    assert ns.getattr(f.ino).stored_bytes == bs + 60
    ns.setattr(f.ino, SetAttrChanges(size=1000))                         # truncate into block 0
    assert (ns.getattr(f.ino).size, ns.getattr(f.ino).stored_bytes) == (1000, 1000)
    ns.setattr(f.ino, SetAttrChanges(size=10 * bs))                      # extended: a hole, nothing stored
    assert ns.getattr(f.ino).stored_bytes == 1000
    sparse = mkfile(ns, "sparse")                                        # only its third block written
    ns.commit_file(sparse.ino, 2 * bs + 5, [write_block(ns, sparse.ino, 2, 5)])
    got = ns.getattr(sparse.ino)
    assert (got.size, got.stored_bytes) == (2 * bs + 5, 5)
    assert ns.lookup(ROOT_INO, "sparse").stored_bytes == 5 == ns.readdir(ROOT_INO)[0][1].attr.stored_bytes
    ns.create(ROOT_INO, "f", FileType.REGULAR, exclusive=False, truncate=True)   # O_TRUNC
    assert ns.getattr(f.ino).stored_bytes == 0


def test_stored_bytes_reach_the_wire_and_a_version_2_store_gets_them_counted(
        tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    f = mkfile(ns, "f")
    ns.commit_file(f.ino, 300, [write_block(ns, f.ino, 0, 300)])
    assert convert.attr_pb(ns.getattr(f.ino)).stored_bytes == 300
    ns.close()
    raw_execute(tmp_path, "ALTER TABLE inodes DROP COLUMN stored",    # what a version-2 master left
                "UPDATE meta SET value='2' WHERE key='schema_version'")
    again = open_store(tmp_path, clock)
    try:
        assert again.schema_version() == SCHEMA_VERSION and again.getattr(f.ino).stored_bytes == 300
        again._db.execute("UPDATE inodes SET stored = 7 WHERE ino=?", (f.ino,))
        assert again.check() == [f"inode {f.ino}: 7 stored bytes recorded, its blocks hold 300"]
        again._db.execute("UPDATE inodes SET stored = 300 WHERE ino=?", (f.ino,))
        assert again.check() == []
    finally:
        again.close()
