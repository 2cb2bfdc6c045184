"""The master's background work (MasterService.maintain_step) driven by fake clocks: a silent
worker leaves the view when its lease is over even when nobody asks, not before; files past their
unlink grace are freed; orphans of a dead session are released; blocks allocated and never
committed are given up on the sweep's schedule. A real store thread runs the store calls."""
from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.master import service as service_module
from curvine_py.master.leases import DirLeases
from curvine_py.master.membership import Membership
from curvine_py.master.service import MasterService
from curvine_py.master.sessions import Sessions
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import ROOT_INO, Usage
from tests.unit.test_master_support import FakeClock, mkfile, open_store, worker

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

LEASE_MS = 1500
GRACE_MS = 500
SESSION_TIMEOUT_S = 30.0


class Master:
    def __init__(self, tmp_path: pathlib.Path, clock: FakeClock) -> None:
        self.clock = clock
        self.ns = open_store(tmp_path, clock, unlink_grace_ms=GRACE_MS)
        self.mem = Membership(self.ns, lease_ms=LEASE_MS, heartbeat_interval_ms=200, clock=clock.monotonic,
                              wall_ms=clock.wall_ms)
        self.store = StoreThread(self.ns)
        self.store.start()
        self.sessions = Sessions(SESSION_TIMEOUT_S, clock=clock.monotonic)
        self.service = MasterService(self.ns, self.mem, self.store, DirLeases(0.0, clock=clock.monotonic),
                                     self.sessions, clock=clock.monotonic)

    def live(self) -> list[str]:
        return [w.worker_id for w in self.store.call(self.ns.load_workers) if w.live]

    def close(self) -> None:
        self.store.stop()
        self.service.close()
        assert self.ns.check() == []
        self.ns.close()


@pytest.fixture
def master(tmp_path: pathlib.Path) -> Iterator[Master]:
    m = Master(tmp_path, FakeClock())
    yield m
    m.close()


def test_a_silent_worker_leaves_when_its_lease_is_over_without_anyone_asking(master: Master) -> None:
    master.store.call(master.mem.register, worker("w1"))
    epoch = master.store.call(master.ns.epoch)
    master.clock.advance(LEASE_MS / 1000)          # exactly at the lease: still live
    master.service.maintain_step()
    assert master.live() == ["w1"]
    master.clock.advance(0.001)
    master.service.maintain_step()
    assert master.live() == []
    assert master.store.call(master.ns.epoch) == epoch + 1, "the leave is a new epoch, made durable"


def test_a_heartbeating_worker_stays(master: Master) -> None:
    master.store.call(master.mem.register, worker("w1"))
    for _ in range(20):
        master.clock.advance(0.2)
        master.store.call(master.mem.heartbeat, "w1", Usage())
        master.service.maintain_step()
    assert master.live() == ["w1"]


def test_files_past_their_unlink_grace_are_freed(master: Master) -> None:
    f = master.store.call(mkfile, master.ns, "f")
    master.store.call(master.ns.unlink, ROOT_INO, "f")
    master.service.maintain_step()
    assert master.store.call(master.ns.counts).inodes == 2, "kept for the grace (a reader elsewhere)"
    master.clock.ns += GRACE_MS * 1_000_000
    master.clock.advance(service_module.ORPHAN_SWEEP_S)
    master.service.maintain_step()
    assert master.store.call(master.ns.counts).inodes == 1
    assert f.ino not in {ino for ino, _ in master.store.call(master.ns.kept_orphans)}


def test_orphans_of_a_dead_session_are_released(master: Master) -> None:
    f = master.store.call(mkfile, master.ns, "open-file")
    master.sessions.seen("mount-1")
    master.store.call(lambda: master.ns.unlink(ROOT_INO, "open-file", keep_orphan=True, keeper="mount-1"))
    master.clock.advance(SESSION_TIMEOUT_S - 1)
    master.sessions.seen("mount-1")
    master.service.maintain_step()
    assert master.store.call(master.ns.kept_orphans) == [(f.ino, "mount-1")], "alive: kept"
    master.clock.advance(SESSION_TIMEOUT_S)
    master.service.maintain_step()
    assert master.store.call(master.ns.kept_orphans) == [], "dead: released to the unlink grace"


def test_blocks_never_committed_are_given_up_on_the_sweep_schedule(master: Master) -> None:
    master.store.call(master.mem.register, worker("w1"))
    f = master.store.call(mkfile, master.ns, "f")
    grant = master.store.call(master.ns.add_block, f.ino, 0, "", master.mem.live_workers())
    master.clock.ns += (service_module.OPEN_BLOCK_MAX_AGE_MS + 1) * 1_000_000
    master.clock.advance(1.0)                      # old enough, but the sweep is not due yet
    master.store.call(master.mem.heartbeat, "w1", Usage())
    master.service.maintain_step()
    assert master.store.call(master.ns.pending_deletions, "w1") == []
    master.clock.advance(service_module.OPEN_BLOCK_SWEEP_S)
    master.store.call(master.mem.heartbeat, "w1", Usage())
    master.service.maintain_step()
    assert master.store.call(master.ns.pending_deletions, "w1") == [grant.block_id]
