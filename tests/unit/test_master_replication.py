"""Replica accounting and the repair rounds, with a fake clock and a fake data plane (the copier):
which blocks are under-replicated, lost or surplus against their policy; rounds copy fewest copies
first within the byte allowance, record the new location only after the copy, give up surplus
copies by placement rank, and say what they could not fix; fsck's inventory requests."""
from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.core.errors import Unavailable
from curvine_py.master import repair as repair_module
from curvine_py.master.membership import Membership
from curvine_py.master.namespace import Namespace
from curvine_py.master.repair import BlockCopier, Repairer
from curvine_py.master.store.replication import BlockCopies
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import ROOT_INO, BlockInfo, Policy, RoundResult, StorageClass, Usage, WorkerInfo
from tests.unit.test_master_support import FakeClock, MiB, mkdir, mkfile, open_store, worker

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

LEASE_MS = 5000
BS = 4 * MiB   # the test store's block size


class FakeCopier(BlockCopier):
    """Records copies instead of moving bytes; `broken` workers fail as an unreachable one would."""

    def __init__(self) -> None:
        self.copies: list[tuple[int, str, str]] = []
        self.broken: set[str] = set()

    def close(self) -> None:
        pass

    def copy(self, block: BlockCopies, source: WorkerInfo, target: WorkerInfo) -> int:
        if source.worker_id in self.broken or target.worker_id in self.broken:
            raise Unavailable("worker down")
        self.copies.append((block.block_id, source.worker_id, target.worker_id))
        return block.length


class World:
    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.clock = FakeClock()
        self.ns = open_store(tmp_path, self.clock, durable_replicas=2)
        self.mem = Membership(self.ns, lease_ms=LEASE_MS, heartbeat_interval_ms=1000, clock=self.clock.monotonic,
                              wall_ms=self.clock.wall_ms)
        self.store = StoreThread(self.ns)
        self.store.start()
        self.copier = FakeCopier()
        self.repairer = Repairer(self.ns, self.store, self.mem, self.copier, rate=10 * MiB,
                                 clock=self.clock.monotonic)

    def join(self, *ids: str) -> None:
        for worker_id in ids:
            self.store.call(self.mem.register, worker(worker_id))

    def beat(self, *ids: str) -> None:
        for worker_id in ids:
            self.store.call(self.mem.heartbeat, worker_id, Usage())

    def file(self, name: str, blocks: int, parent: int = ROOT_INO, length: int = MiB) -> int:
        def make() -> int:
            f = mkfile(self.ns, name, parent)
            infos = []
            for index in range(blocks):      # full blocks, then `length` bytes in the last one
                grant = self.ns.add_block(f.ino, index, "", self.mem.live_workers())
                size = length if index == blocks - 1 else grant.block_size
                infos.append(BlockInfo(index, grant.block_id, size, 1, grant.worker_ids))
            self.ns.commit_file(f.ino, (blocks - 1) * BS + length, infos)
            return f.ino
        return self.store.call(make)

    def holders(self, ino: int) -> list[tuple[str, ...]]:
        return [b.worker_ids for b in self.store.call(self.ns.get_blocks, ino, self.mem.live_ids()).blocks]

    def lose(self, worker_id: str, others: tuple[str, ...]) -> None:
        """`worker_id` falls silent past its lease while `others` keep heartbeating."""
        for _ in range(int(LEASE_MS / 1000) + 2):
            self.clock.advance(1.0)
            self.beat(*others)
        assert worker_id not in self.mem.live_ids()
        assert set(others) <= self.mem.live_ids()


@pytest.fixture
def world(tmp_path: pathlib.Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.store.stop()
    w.repairer.close()
    assert w.ns.check() == []
    w.ns.close()


def test_state_counts_against_each_directory_policy(world: World) -> None:
    world.join("a", "b", "c")
    durable = world.file("durable", 2)                      # 2 copies each (durable default)
    cache_dir = world.store.call(mkdir, world.ns, "cache")
    world.store.call(world.ns.set_policy, "/cache", Policy(StorageClass.CACHE))
    world.file("cached", 1, cache_dir.ino)                  # 1 copy wanted
    state = world.repairer.scan()
    assert (len(state.under), len(state.lost), len(state.surplus)) == (0, 0, 0)
    lost_worker = world.holders(durable)[0][0]
    others = tuple(w for w in "abc" if w != lost_worker)
    world.lose(lost_worker, others)
    state = world.repairer.scan()
    assert {b.ino for b in state.under} == {durable}
    assert all(len(b.holders) == 1 and b.wanted == 2 for b in state.under)
    # a cache block whose only copy was there is lost (a miss for readers), not repairable
    assert all(b.storage_class == StorageClass.CACHE for b in state.lost)
    assert len(state.lost_files) == len({b.ino for b in state.lost})


def test_a_round_copies_fewest_copies_first_and_records_the_location_after(world: World) -> None:
    world.join("a", "b", "c", "d")
    world.store.call(world.ns.set_policy, "/", Policy(StorageClass.DURABLE, replicas=3))
    ino = world.file("f", 3)
    before = world.holders(ino)
    # lose two workers: blocks left with 1 copy must come before those with 2
    gone = set(before[0][:2])
    for worker_id in sorted(gone):
        world.lose(worker_id, tuple(w for w in "abcd" if w not in gone))
    state = world.repairer.scan()
    ranked = [len(b.holders) for b in state.under]
    assert ranked == sorted(ranked) and ranked[0] == 1
    result = world.repairer.step()
    # Blocks with 1 copy get a second on the other live worker; those that already have both
    # live workers are said to be unrepairable, not hidden.
    single = sum(1 for b in state.under if len(b.holders) == 1)
    assert (result.copied, result.unplaceable, result.failed) == (single, len(state.under) - single, 0)
    assert all(len(h) == 2 for h in world.holders(ino))
    assert {target for _, _, target in world.copier.copies} <= set("abcd") - gone
    assert world.repairer.stats().copied_blocks == len(world.copier.copies)
    left = world.repairer.scan().under
    assert left and all(len(b.holders) == 2 and b.wanted == 3 for b in left), "3 wanted: still under"


def test_the_byte_allowance_bounds_a_round_and_refills_with_the_clock(world: World) -> None:
    world.join("a", "b", "c")
    world.repairer.rate = 2 * MiB
    world.repairer._allowance = 2 * MiB
    inos = [world.file(f"f{i}", 1, length=MiB) for i in range(6)]
    lost = world.holders(inos[0])[0][0]
    world.lose(lost, tuple(w for w in "abc" if w != lost))
    under = len(world.repairer.scan().under)
    assert under >= 3
    first = world.repairer.step()
    assert first.throttled and first.copied == 2, "2 MiB of allowance: two 1 MiB blocks"
    second = world.repairer.step()       # no time passed: nothing
    assert second.throttled and second.copied == 0
    world.clock.advance(1.0)
    world.beat(*(w for w in "abc" if w != lost))
    assert world.repairer.step().copied == 2
    world.clock.advance(10.0)
    world.beat(*(w for w in "abc" if w != lost))
    world.repairer.rate = 100 * MiB
    world.repairer.step()
    assert world.repairer.scan().under == ()


def test_failed_copies_are_counted_and_tried_from_another_source(world: World) -> None:
    world.join("a", "b", "c", "d")
    world.store.call(world.ns.set_policy, "/", Policy(StorageClass.DURABLE, replicas=3))
    ino = world.file("f", 1)
    (holders,) = world.holders(ino)
    (block,) = world.store.call(world.ns.get_blocks, ino).blocks
    spare = next(w for w in "abcd" if w not in holders)
    world.lose(holders[0], tuple(w for w in "abcd" if w != holders[0]))
    world.copier.broken = {holders[1]}           # one source unreachable: the other one serves
    result = world.repairer.step()
    assert (result.copied, result.failed) == (1, 0)
    assert world.copier.copies == [(block.block_id, holders[2], spare)]
    assert sorted(world.holders(ino)[0]) == sorted([holders[1], holders[2], spare])
    # every source fails: the copy fails, is counted and said, the location is not recorded
    world.store.call(world.ns.drop_replica, block.block_id, spare)
    world.copier.broken = {holders[1], holders[2]}
    failed = world.repairer.step()
    assert (failed.copied, failed.failed) == (0, 1) and "worker down" in failed.errors[-1]
    assert world.repairer.stats().failed_copies == 3, "every failed attempt: b, then b and c"
    assert "worker down" in world.repairer.stats().last_error
    assert spare not in world.holders(ino)[0]


def test_no_worker_left_to_take_a_copy_is_said(world: World) -> None:
    world.join("a", "b")
    world.store.call(world.ns.set_policy, "/", Policy(StorageClass.DURABLE, replicas=3))
    world.file("f", 1)
    result = world.repairer.step()
    # 3 copies wanted, 2 live workers hold them: under-replicated, and the reason is said.
    assert (result.copied, result.unplaceable) == (0, 1)
    assert any("only 2 live workers" in error for error in result.errors)


def test_surplus_copies_are_given_up_by_placement_rank(world: World) -> None:
    world.join("a", "b", "c")
    ino = world.file("f", 2)
    block_ids = [b.block_id for b in world.store.call(world.ns.get_blocks, ino).blocks]
    for block_id in block_ids:                   # a third copy each, as a returning worker brings
        for w in "abc":
            world.store.call(world.ns.add_replica, block_id, w)
    assert len(world.repairer.scan().surplus) == 2
    result = world.repairer.step()
    assert result.dropped == 2
    assert all(len(h) == 2 for h in world.holders(ino))
    dropped_on = {w: world.store.call(world.ns.pending_deletions, w) for w in "abc"}
    assert sorted(b for ids in dropped_on.values() for b in ids) == sorted(block_ids), \
        "each surplus copy is deleted on its worker"


def test_a_copy_of_a_block_freed_meanwhile_is_deleted_not_recorded(world: World) -> None:
    world.join("a", "b")
    ino = world.file("f", 1)
    (block,) = world.store.call(world.ns.get_blocks, ino).blocks
    world.store.call(world.ns.unlink, ROOT_INO, "f")
    assert not world.store.call(world.ns.add_replica, block.block_id, "b")
    assert block.block_id in world.store.call(world.ns.pending_deletions, "b")


def test_fsck_inventory_requests(world: World) -> None:
    world.join("a", "b")
    ino = world.file("f", 1)
    assert world.store.call(world.mem.request_inventories) == ["a", "b"]
    assert world.store.call(world.mem.inventories) == ([], ["a", "b"])
    reply = world.store.call(world.mem.heartbeat, "a", Usage())
    assert reply.reregister, "asked to send its inventory by registering again"
    (block,) = world.store.call(world.ns.get_blocks, ino).blocks
    kept = [b for b in [block.block_id] if "a" in block.worker_ids]
    world.store.call(world.mem.register, worker("a"), [*kept, 999_999])    # one orphan block
    found, pending = world.store.call(world.mem.inventories)
    assert pending == ["b"]
    assert [(i.worker_id, i.reported, i.missing, i.orphans) for i in found] == [("a", len(kept) + 1, 0, 1)]
    assert not world.store.call(world.mem.heartbeat, "a", Usage()).reregister, "once"


def test_namespace_facade_has_replication(world: World) -> None:
    assert isinstance(world.ns, Namespace)
    assert world.repairer.enabled


def test_idle_rounds_skip_the_scan_until_something_changes(world: World) -> None:
    world.join("a", "b", "c")
    ino = world.file("f", 1)
    (block,) = world.store.call(world.ns.get_blocks, ino).blocks
    assert world.repairer.step() == RoundResult()       # a scan: nothing to do
    # a copy vanishes behind the store's back: idle rounds do not see it ...
    world.ns._db.execute("DELETE FROM locations WHERE block_id=? AND worker_id=?",
                         (block.block_id, block.worker_ids[0]))
    assert world.repairer.step().copied == 0
    # ... until the periodic full scan
    for _ in range(int(repair_module.FULL_SCAN_S)):      # a minute of heartbeats, nothing else
        world.clock.advance(1.0)
        world.beat("a", "b", "c")
    assert world.repairer.step().copied == 1
    # a change through the store (a bad copy in a heartbeat) is seen at the next round
    assert world.repairer.step() == RoundResult()
    (block,) = world.store.call(world.ns.get_blocks, ino).blocks
    world.store.call(world.mem.heartbeat, block.worker_ids[0], Usage(), (), [block.block_id])
    assert world.repairer.step().copied == 1


def test_the_last_scan_is_reused_only_while_nothing_changed(world: World) -> None:
    world.join("a", "b", "c")
    assert world.repairer.cached_state() is None, "no scan yet"
    ino = world.file("f", 1)
    state = world.repairer.scan()
    assert world.repairer.cached_state() is state
    (block,) = world.store.call(world.ns.get_blocks, ino).blocks
    world.store.call(world.mem.heartbeat, block.worker_ids[0], Usage(), (), [block.block_id])   # a bad copy
    assert world.repairer.cached_state() is None
    assert len(world.repairer.scan().under) == 1
    world.join("d")                                   # a membership change (new epoch)
    assert world.repairer.cached_state() is None
