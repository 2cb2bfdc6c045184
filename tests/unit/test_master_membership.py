"""Worker membership with a fake clock (no sleeps): registration and block-report reconcile,
heartbeats, lease expiry, the epoch (join, leave, rejoin, restarts), evictions and bad blocks."""
from __future__ import annotations

import dataclasses
import pathlib

import pytest

from curvine_py.core.errors import InvalidArgument, NotFound
from curvine_py.master.membership import Membership
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, BlockInfo, Policy, StorageClass, Usage
from tests.unit.test_master_support import FakeClock, mkdir, mkfile, open_store, worker

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

LEASE_MS = 5000


def membership(ns: Namespace, clock: FakeClock) -> Membership:
    return Membership(ns, lease_ms=LEASE_MS, heartbeat_interval_ms=1000, clock=clock.monotonic,
                      wall_ms=clock.wall_ms)


@pytest.fixture
def mem(ns: Namespace, clock: FakeClock) -> Membership:
    return membership(ns, clock)


def live_ids(mem: Membership) -> list[str]:
    return [w.worker_id for w in mem.view().workers if w.live]


def committed_file(ns: Namespace, mem: Membership, name: str, parent: int = ROOT_INO,
                   blocks: int = 1) -> tuple[int, list[BlockInfo]]:
    f = mkfile(ns, name, parent)
    infos = []
    for index in range(blocks):
        grant = ns.add_block(f.ino, index, "", mem.live_workers())
        length = 10 if index == blocks - 1 else f.block_size
        infos.append(BlockInfo(index, grant.block_id, length, 1, grant.worker_ids))
    ns.commit_file(f.ino, f.block_size * (blocks - 1) + 10, infos)
    return f.ino, infos


# ---------------------------------------------------------------------------------------------- register


def test_register_joins_and_bumps_the_epoch(mem: Membership, ns: Namespace) -> None:
    assert mem.view().epoch == 0 and live_ids(mem) == []
    reply = mem.register(worker("w1", capacity=100))
    assert (reply.epoch, reply.lease_ms, reply.heartbeat_interval_ms) == (1, LEASE_MS, 1000)
    assert reply.cluster_id == ns.cluster_id and reply.delete_block_ids == ()
    view = mem.view()
    assert view.epoch == 1 and [w.worker_id for w in view.workers] == ["w1"]
    assert view.workers[0].live and view.workers[0].capacity == 100
    mem.register(worker("w2"))
    assert mem.view().epoch == 2 and live_ids(mem) == ["w1", "w2"]


def test_reregister_replaces_the_info(mem: Membership) -> None:
    mem.register(worker("w1"))
    moved = dataclasses.replace(worker("w1"), port=9999, node="n9")
    assert mem.register(moved).epoch == 2            # addresses may have changed: clients refresh
    (info,) = mem.view().workers
    assert (info.port, info.node) == (9999, "n9")


def test_register_validates_the_worker_id(mem: Membership) -> None:
    for bad in ("", "a,b", "has space", "x" * 200):
        with pytest.raises(InvalidArgument):
            mem.register(worker(bad))
    with pytest.raises(InvalidArgument):
        mem.register(dataclasses.replace(worker("w1"), port=70000))


def test_register_reconciles_the_block_report(mem: Membership, ns: Namespace, clock: FakeClock) -> None:
    mem.register(worker("w1"))
    mem.register(worker("w2"))
    ino, (b,) = committed_file(ns, mem, "f")
    assert set(b.worker_ids) == {"w1", "w2"}
    open_grant = ns.add_block(ino, 1, "", mem.live_workers())          # allocated, being written
    _g_ino, (freed,) = committed_file(ns, mem, "g")
    ns.unlink(ROOT_INO, "g")
    # w3 joins and claims to hold f's block (copied there by hand, say), an unknown id, the open
    # block, a freed block and an id that cannot be ours
    mem.register(worker("w3"))
    reply = mem.register(worker("w3"), [b.block_id, 424242, open_grant.block_id, freed.block_id, 1 << 63])
    assert set(reply.delete_block_ids) == {424242, freed.block_id, 1 << 63}
    assert set(ns.get_blocks(ino).blocks[0].worker_ids) == {"w1", "w2", "w3"}
    # w1 comes back with an empty disk: its location is dropped (once the report cannot predate
    # the commit), its pending deletions are moot
    assert ns.pending_deletions("w1") == [freed.block_id]
    reply = mem.register(worker("w1"), [])
    assert set(ns.get_blocks(ino).blocks[0].worker_ids) == {"w1", "w2", "w3"}
    clock.ns += 61_000 * 1_000_000
    reply = mem.register(worker("w1"), [])
    assert reply.delete_block_ids == ()
    assert set(ns.get_blocks(ino).blocks[0].worker_ids) == {"w2", "w3"}
    assert ns.pending_deletions("w1") == []


# ---------------------------------------------------------------------------------------------- heartbeat, lease


def test_heartbeat_from_an_unknown_worker_asks_to_reregister(mem: Membership) -> None:
    result = mem.heartbeat("stranger", Usage())
    assert result.reregister and result.epoch == 0


def test_heartbeat_updates_usage_and_hands_out_deletions(mem: Membership, ns: Namespace) -> None:
    mem.register(worker("w1"))
    _ino, (b,) = committed_file(ns, mem, "f")
    ns.unlink(ROOT_INO, "f")
    result = mem.heartbeat("w1", Usage(capacity=1000, used=10, available=990, blocks=1, objects=2, evictions=3))
    assert not result.reregister and result.epoch == 1
    assert result.delete_block_ids == (b.block_id,)
    (info,) = mem.view().workers
    assert (info.capacity, info.blocks, info.objects, info.evictions) == (1000, 1, 2, 3)
    assert ns.statfs(mem.live_workers()).capacity == 1000
    assert mem.heartbeat("w1", Usage(capacity=1000)).delete_block_ids == ()


def test_lease_expiry_leave_and_rejoin(mem: Membership, clock: FakeClock) -> None:
    mem.register(worker("w1"))
    mem.register(worker("w2"))
    assert mem.epoch == 2
    clock.advance(3.0)
    mem.heartbeat("w2", Usage())
    clock.advance(2.5)                       # w1 silent 5.5 s > lease, w2 silent 2.5 s
    view = mem.view()
    # w1 stays in the view, not live: clients keep its address for the blocks it holds
    assert [(w.worker_id, w.live) for w in view.workers] == [("w1", False), ("w2", True)] and view.epoch == 3
    assert mem.heartbeat("w1", Usage()).reregister       # lost: must re-register (full report)
    assert mem.register(worker("w1")).epoch == 4         # rejoin
    assert live_ids(mem) == ["w1", "w2"]


def test_silence_exactly_at_the_lease_is_still_live(mem: Membership, clock: FakeClock) -> None:
    mem.register(worker("w1"))
    clock.advance(LEASE_MS / 1000)
    assert live_ids(mem) == ["w1"]
    clock.advance(0.001)
    assert live_ids(mem) == []


def test_several_workers_leaving_together_bump_the_epoch_once(mem: Membership, clock: FakeClock) -> None:
    for name in ("a", "b", "c"):
        mem.register(worker(name))
    clock.advance(10)
    assert sorted(mem.expire()) == ["a", "b", "c"]
    assert mem.epoch == 4 and mem.expire() == []


def test_report_lists_live_and_lost_workers(mem: Membership, ns: Namespace, clock: FakeClock) -> None:
    mem.register(worker("a"))
    mem.register(worker("b"))
    mem.heartbeat("a", Usage(capacity=100, used=40, available=60))
    mem.heartbeat("b", Usage(capacity=10, used=1, available=9))
    mkdir(ns, "d")
    committed_file(ns, mem, "f", blocks=2)
    clock.advance(4)
    mem.heartbeat("a", Usage(capacity=100, used=40, available=60))
    clock.advance(2)                           # b is lost
    report = mem.report()
    assert [(w.worker_id, w.live) for w in report.workers] == [("a", True), ("b", False)]
    assert (report.capacity, report.used, report.available) == (100, 40, 60)
    assert (report.files, report.directories, report.blocks) == (1, 2, 2)
    assert report.epoch == 3 and report.cluster_id == ns.cluster_id


def test_the_view_carries_every_registered_worker_with_its_live_flag(mem: Membership, clock: FakeClock) -> None:
    mem.register(worker("a"))
    mem.register(dataclasses.replace(worker("b"), port=9100))
    clock.advance(3)
    mem.heartbeat("a", Usage())
    clock.advance(3)                           # b past its lease: it leaves the live set, not the view
    view = mem.view()
    assert [(w.worker_id, w.live, w.port) for w in view.workers] == [("a", True, 9000), ("b", False, 9100)]
    assert view.epoch == 3 and [w.worker_id for w in mem.live_workers()] == ["a"]
    mem.register(worker("b"))                  # back: live again, one more epoch
    assert [(w.worker_id, w.live) for w in mem.view().workers] == [("a", True), ("b", True)]
    assert mem.view().epoch == 4


def test_copies_keep_registered_workers_live_ones_first(mem: Membership, clock: FakeClock) -> None:
    for name in ("a", "b", "c"):
        mem.register(worker(name))
    clock.advance(3)
    mem.heartbeat("b", Usage())
    mem.heartbeat("c", Usage())
    clock.advance(3)
    mem.expire()                               # a is past its lease; b and c are live
    # a's copy stays listed (it may only be late), after every live one; an unknown worker's goes
    assert mem.copies(["a", "stranger", "c", "b"]) == ("c", "b", "a")
    assert mem.copies(["a"]) == ("a",)
    assert mem.copies([]) == ()


# ---------------------------------------------------------------------------------------------- restarts


def test_epoch_and_workers_persist_across_restart(tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    mem = membership(ns, clock)
    mem.register(worker("w1"))
    mem.register(worker("w2"))
    clock.advance(3)
    mem.heartbeat("w2", Usage())
    clock.advance(3)
    mem.expire()                                 # w1 leaves: epoch 3
    ns.close()

    ns = open_store(tmp_path, clock)
    again = membership(ns, clock)
    assert again.epoch == 3                      # never backwards
    assert live_ids(again) == ["w2"]              # the live set is restored with a fresh lease
    assert not again.heartbeat("w2", Usage()).reregister
    assert again.heartbeat("w1", Usage()).reregister
    clock.advance(6)
    assert live_ids(again) == [] and again.epoch == 4
    assert [w.worker_id for w in again.report().workers] == ["w1", "w2"]
    ns.close()


# ---------------------------------------------------------------------------------------------- evictions


def test_evicted_block_of_a_cache_file_unlinks_it(mem: Membership, ns: Namespace) -> None:
    mem.register(worker("w1"))
    mem.register(worker("w2"))
    cache = mkdir(ns, "kv")
    ns.set_policy("/kv", Policy(StorageClass.CACHE))
    ino, blocks = committed_file(ns, mem, "chunk", cache.ino, blocks=2)
    ns.link(ino, ROOT_INO, "alias")
    holder = blocks[0].worker_ids[0]
    before = ns.getattr(cache.ino)
    result = mem.heartbeat(holder, Usage(), evicted=[blocks[0].block_id])
    with pytest.raises(NotFound):
        ns.lookup(cache.ino, "chunk")          # a clean miss, not an I/O error
    with pytest.raises(NotFound):
        ns.lookup(ROOT_INO, "alias")
    with pytest.raises(NotFound):
        ns.getattr(ino)
    assert ns.getattr(cache.ino).mtime_ns > before.mtime_ns
    # its other block is to be deleted (handed out in this reply or queued); the evicted one is
    # already gone from the worker and is not
    to_delete = {w: ns.pending_deletions(w) for w in ("w1", "w2")}
    to_delete[holder] = sorted(to_delete[holder] + list(result.delete_block_ids))
    other = blocks[1]
    assert to_delete == {w: ([other.block_id] if w in other.worker_ids else []) for w in ("w1", "w2")}


def test_eviction_keeps_a_cache_file_that_has_another_copy(mem: Membership, ns: Namespace) -> None:
    mem.register(worker("w1"))
    mem.register(worker("w2"))
    cache = mkdir(ns, "kv")
    ns.set_policy("/kv", Policy(StorageClass.CACHE, replicas=2))
    ino, (b,) = committed_file(ns, mem, "chunk", cache.ino)
    assert len(b.worker_ids) == 2
    mem.heartbeat(b.worker_ids[0], Usage(), evicted=[b.block_id])
    assert ns.get_blocks(ino).blocks[0].worker_ids == (b.worker_ids[1],)
    mem.heartbeat(b.worker_ids[1], Usage(), evicted=[b.block_id])
    with pytest.raises(NotFound):
        ns.getattr(ino)


def test_lost_block_of_a_durable_file_only_drops_the_location(mem: Membership, ns: Namespace) -> None:
    mem.register(worker("w1"))
    ino, (b,) = committed_file(ns, mem, "f")
    mem.heartbeat("w1", Usage(), evicted=[b.block_id])
    assert ns.get_blocks(ino).blocks[0].worker_ids == ()
    assert ns.lookup(ROOT_INO, "f").ino == ino


def test_bad_blocks_drop_the_location(mem: Membership, ns: Namespace) -> None:
    mem.register(worker("w1"))
    mem.register(worker("w2"))
    ino, (b,) = committed_file(ns, mem, "f")
    mem.heartbeat(b.worker_ids[0], Usage(), bad=[b.block_id, 777])
    assert ns.get_blocks(ino).blocks[0].worker_ids == (b.worker_ids[1],)
    assert ns.lookup(ROOT_INO, "f").ino == ino


def test_evictions_from_a_lost_worker_wait_for_its_reregistration(mem: Membership, ns: Namespace,
                                                                    clock: FakeClock) -> None:
    mem.register(worker("w1"))
    ino, (b,) = committed_file(ns, mem, "f")
    clock.advance(10)
    assert mem.heartbeat("w1", Usage(), evicted=[b.block_id]).reregister
    assert ns.get_blocks(ino).blocks[0].worker_ids == ("w1",)     # untouched until the full report
    clock.ns += 61_000 * 1_000_000
    mem.register(worker("w1"), [])
    assert ns.get_blocks(ino).blocks[0].worker_ids == ()


def test_a_stall_of_the_master_is_not_held_against_the_workers(mem: Membership, clock: FakeClock) -> None:
    """The maintenance loop checks every 0.5 s; the master then does not run for 4 s (starved, its
    store thread in a slow commit): the first check after it must not expire workers whose
    heartbeats wait unread in its queues. Their silence after the stall still counts."""
    mem.expect_checks_every(0.5)
    mem.register(worker("w1"))
    for _ in range(2):
        clock.advance(0.5)
        assert mem.expire() == []
    clock.advance(4.0)                          # t = 5: silent 5 s = the lease, but the master slept 4 s
    assert mem.expire() == [] and live_ids(mem) == ["w1"]
    # The stall beyond two intervals (3 s) is credited: w1 counts as seen at t = 3 and leaves at
    # the first check more than a lease later, t = 8.5 (checks every 0.5 s again).
    gone_at = 5.0
    while live_ids(mem):
        clock.advance(0.5)
        gone_at += 0.5
        mem.expire()
    assert gone_at == 3.0 + LEASE_MS / 1000 + 0.5


def test_a_steadily_slow_master_still_expires_a_dead_worker(mem: Membership, clock: FakeClock) -> None:
    """Checks that come late but within two intervals get no credit: a worker that stopped
    heartbeating leaves after its lease, as without the stall credit."""
    mem.expect_checks_every(0.5)
    mem.register(worker("w1"))
    waited = 0.0
    while live_ids(mem):
        clock.advance(0.9)
        waited += 0.9
        mem.expire()
        assert waited < LEASE_MS / 1000 + 1.0
    assert waited > LEASE_MS / 1000


def test_without_a_maintenance_loop_a_long_silence_expires_at_once(mem: Membership, clock: FakeClock) -> None:
    mem.register(worker("w1"))
    clock.advance(LEASE_MS / 1000 + 1.0)
    assert mem.expire() == ["w1"]
