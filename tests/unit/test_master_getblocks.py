"""GetBlocks, the call every open of a file makes: the store's one-join read of a file's blocks and
locations (store/blocks.py) gives exactly the block map, and the service answers it on a handler
thread's reader over real gRPC (committed state, never queued behind the store thread), with the
copies on registered workers only, live ones first (membership.py's published view)."""
from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from curvine_py.client.master import MasterClient
from curvine_py.core.errors import InvalidArgument, IsADirectory, NotFound
from curvine_py.master.leases import DirLeases
from curvine_py.master.membership import Membership
from curvine_py.master.namespace import Namespace
from curvine_py.master.service import MasterService, add_port, build_server
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import ROOT_INO, BlockInfo, FileType, Policy, StorageClass, Usage
from curvine_py.rpc.tls import TlsFiles
from tests.unit.test_master_support import FakeClock, mkdir, mkfile, open_store, worker

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

BS = 4 << 20
LEASE_MS = 1500
BIG_CHECKSUM = (1 << 64) - 5      # above 2**63: stored negative, read back as it was


@pytest.fixture
def ns(tmp_path: pathlib.Path) -> Iterator[Namespace]:
    store = open_store(tmp_path, FakeClock())
    yield store
    store.close()


def commit(ns: Namespace, ino: int, workers: tuple[str, ...], *checksums: int) -> list[BlockInfo]:
    """Blocks 0..n-1 of a file, each recorded on `workers` (given in reverse order)."""
    blocks = [BlockInfo(i, ns.add_block(ino, i, "", [worker(w) for w in workers]).block_id, BS, c,
                        tuple(reversed(workers))) for i, c in enumerate(checksums)]
    ns.commit_file(ino, BS * len(blocks), blocks)
    return blocks


def test_the_block_map_by_index_with_each_blocks_workers_in_order(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    ns.set_policy("/d", Policy(StorageClass.CACHE, replicas=2, ttl_ms=5000))
    f = mkfile(ns, "f", d.ino)
    written = commit(ns, f.ino, ("w1", "w2", "w3"), 11, BIG_CHECKSUM, 0)
    fb = ns.get_blocks(f.ino)
    assert fb.attr == ns.getattr(f.ino)
    assert [(b.index, b.block_id, b.length, b.checksum) for b in fb.blocks] == \
        [(b.index, b.block_id, b.length, b.checksum) for b in written]
    assert [b.worker_ids for b in fb.blocks] == [("w1", "w2", "w3")] * 3
    assert fb.policy == ns.effective_policy(f.ino)
    assert (fb.policy.storage_class, fb.policy.replicas, fb.policy.ttl_ms) == (StorageClass.CACHE, 2, 5000)
    assert [b.worker_ids for b in ns.get_blocks(f.ino, {"w3", "w1"}).blocks] == [("w1", "w3")] * 3


def test_a_file_without_blocks_and_a_block_without_copies(ns: Namespace) -> None:
    empty = mkfile(ns, "empty")
    fb = ns.get_blocks(empty.ino)
    assert (fb.attr, fb.blocks, fb.policy) == (ns.getattr(empty.ino), (), ns.effective_policy(empty.ino))
    f = mkfile(ns, "f")
    written = commit(ns, f.ino, ("w1",), 1, 2)
    ns.drop_locations("w1", [written[0].block_id], unlink_cache=False)     # a durable file keeps its name
    assert [(b.block_id, b.worker_ids) for b in ns.get_blocks(f.ino).blocks] == \
        [(written[0].block_id, ()), (written[1].block_id, ("w1",))]


def test_only_a_regular_file_that_still_has_a_name_or_a_keeper(ns: Namespace) -> None:
    with pytest.raises(IsADirectory):
        ns.get_blocks(ROOT_INO)
    link = ns.create(ROOT_INO, "l", FileType.SYMLINK, 0o777, symlink_target="/x")
    with pytest.raises(InvalidArgument):
        ns.get_blocks(link.ino)
    for ino in (0, -1, 1 << 63, 10_000):
        with pytest.raises(NotFound):
            ns.get_blocks(ino)
    kept = mkfile(ns, "kept")
    commit(ns, kept.ino, ("w1",), 3)
    ns.unlink(ROOT_INO, "kept", keep_orphan=True, keeper="s1")
    assert len(ns.get_blocks(kept.ino).blocks) == 1, "an open file's blocks stay readable"


class Served:
    """MasterService on a real grpc.server on loopback, its store thread, and a client."""

    def __init__(self, tmp_path: pathlib.Path, clock: FakeClock) -> None:
        self.clock = clock
        self.ns = open_store(tmp_path, clock)
        self.mem = Membership(self.ns, lease_ms=LEASE_MS, heartbeat_interval_ms=200, clock=clock.monotonic,
                              wall_ms=clock.wall_ms)
        self.store = StoreThread(self.ns)
        self.store.start()
        self.service = MasterService(self.ns, self.mem, self.store, DirLeases(0.0, clock=clock.monotonic),
                                     clock=clock.monotonic)
        self.server = build_server(self.service, "", threads=4)
        port = add_port(self.server, "127.0.0.1:0", TlsFiles())
        self.server.start()
        self.client = MasterClient(f"127.0.0.1:{port}", timeout_s=10.0)

    def close(self) -> None:
        self.client.close()
        self.server.stop(None)
        self.store.stop()
        self.service.close()
        self.ns.close()


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[Served]:
    s = Served(tmp_path, FakeClock())
    yield s
    s.close()


def test_getblocks_is_answered_while_the_store_thread_is_busy(served: Served) -> None:
    f = served.store.call(mkfile, served.ns, "f")
    written = served.store.call(commit, served.ns, f.ino, ("w1",), 5)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:           # a batch that does not end (a slow fsync, a long store call)
        held.set()
        release.wait(30)

    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(served.store.call, hold)
        try:
            assert held.wait(10)
            fb = served.client.get_blocks(f.ino)
        finally:
            release.set()
        busy.result(10)
    assert [(b.block_id, b.checksum) for b in fb.blocks] == [(written[0].block_id, 5)]
    assert fb.attr.size == BS


def test_getblocks_sees_every_acknowledged_commit(served: Served) -> None:
    f = served.store.call(mkfile, served.ns, "f")
    seen = []
    for round_ in range(1, 6):     # each commit replaces block 0: the reader must see the new one
        written = served.store.call(commit, served.ns, f.ino, ("w1",), round_)
        seen.append(served.client.get_blocks(f.ino).blocks[0].block_id == written[0].block_id)
    assert seen == [True] * 5


def test_copies_on_registered_workers_only_live_ones_first(served: Served) -> None:
    for w in ("w1", "w2", "w3"):
        served.store.call(served.mem.register, worker(w))
    f = served.store.call(mkfile, served.ns, "f")
    served.store.call(commit, served.ns, f.ino, ("ghost", "w1", "w2", "w3"), 1)    # ghost never registered

    def copies() -> tuple[str, ...]:
        return served.client.get_blocks(f.ino).blocks[0].worker_ids

    assert copies() == ("w1", "w2", "w3")
    served.clock.advance(LEASE_MS / 1000 * 0.75)
    for w in ("w2", "w3"):                         # w1 stays silent past its lease
        served.store.call(served.mem.heartbeat, w, Usage())
    served.clock.advance(LEASE_MS / 1000 * 0.5)
    served.store.call(served.mem.expire)
    assert served.store.call(served.mem.live_ids) == {"w2", "w3"}
    assert copies() == ("w2", "w3", "w1"), "a copy past its lease is listed last, not dropped"
    served.store.call(served.mem.register, worker("w1"))
    assert copies() == ("w1", "w2", "w3"), "back in the view at its registration"

