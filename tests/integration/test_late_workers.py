"""A worker that is registered but past its lease (its heartbeats are late: a starved machine) is
still used for what the master granted or lists: a block granted to it is written there, and a
copy on it is read (after every live copy). A worker that is really dead (SIGKILL) still costs
nothing where a live copy exists, makes a write ask for a new grant once, and fails a read of its
only copy with a clear error, fast.

Real processes: the master and workers of tests/harness.py; each worker reaches the master through
its own tests/relay.py relay, which a test cuts to stop that worker's heartbeats (and only them:
clients reach its data plane directly)."""
from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Callable, Iterator

import pytest

from curvine_py.client import CurvineClient
from curvine_py.core.domain import PLACEMENT_LOCAL, AddedBlock, Policy, StorageClass
from curvine_py.core.errors import CurvineError, Unavailable
from curvine_py.procs import RoleProcess, curvine_command, start
from tests.harness import Cluster, random_bytes, wait_until
from tests.relay import Relay

MiB = 1 << 20
BOUND_S = 10.0   # a refused connection costs milliseconds; generous for a loaded machine
LEASE_S = 20.0   # how long a test waits for the master (2 s leases, tests/harness.py) to drop a worker


class Lab:
    """A master and `count` workers, worker i on node `node{i}` behind relay i."""

    def __init__(self, cluster: Cluster, relays: list[Relay], workers: list[RoleProcess]) -> None:
        self.cluster = cluster
        self.relays = relays
        self.workers = workers

    def worker_id(self, index: int) -> str:
        return self.workers[index].field("id")

    def other_than(self, worker_id: str) -> str:
        """The id of a worker that is not `worker_id`."""
        return next(w.field("id") for w in self.workers if w.field("id") != worker_id)

    def index_of(self, worker_id: str) -> int:
        return next(i for i, w in enumerate(self.workers) if w.field("id") == worker_id)

    def live(self, client: CurvineClient) -> set[str]:
        return {w.worker_id for w in client.master.membership().workers if w.live}

    def wait_not_live(self, client: CurvineClient, worker_id: str) -> None:
        """Until the master has dropped the worker from its live set and `client`'s view says so."""
        wait_until(lambda: worker_id not in client.membership.refresh().workers, LEASE_S,
                   f"the master to drop {worker_id} from its live set")


@pytest.fixture
def lab2(tmp_path: pathlib.Path) -> Iterator[Lab]:
    yield from lab_of(tmp_path, 2)


@pytest.fixture
def lab1(tmp_path: pathlib.Path) -> Iterator[Lab]:
    yield from lab_of(tmp_path, 1)


def lab_of(root: pathlib.Path, count: int) -> Iterator[Lab]:
    with Cluster(root, workers=0) as cluster:
        relays: list[Relay] = []
        workers: list[RoleProcess] = []
        try:
            for index in range(count):
                relays.append(Relay(cluster.master_address))
                data_dir = root / f"worker{index}"
                data_dir.mkdir()
                workers.append(start(f"worker{index}", curvine_command(
                    "worker", "--master", relays[index].address, "--data-dir", str(data_dir), "--port", "0",
                    "--node", f"node{index}"), ready_prefix="worker="))
            cluster.wait_for_live_workers(count)
            yield Lab(cluster, relays, workers)
        finally:
            for worker in workers:
                worker.kill()
            for relay in relays:
                relay.close()


def after_first_grant(client: CurvineClient, monkeypatch: pytest.MonkeyPatch,
                      fault: Callable[[AddedBlock], None]) -> list[AddedBlock]:
    """Makes `fault(grant)` happen right after the master answers the client's first AddBlock
    (the moment of the defect: granted, then gone from the live set). Returns every grant seen."""
    grants: list[AddedBlock] = []
    real = client.master.add_block

    def add_block(ino: int, index: int, client_node: str = "") -> AddedBlock:
        grant = real(ino, index, client_node)
        grants.append(grant)
        if len(grants) == 1:
            fault(grant)
        return grant

    monkeypatch.setattr(client.master, "add_block", add_block)
    return grants


def test_a_block_granted_to_a_worker_that_then_missed_its_lease_is_written_there(
        lab1: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    late = lab1.worker_id(0)
    writer = lab1.cluster.client()

    def heartbeats_stop(grant: AddedBlock) -> None:
        assert grant.worker_ids == (late,)
        lab1.relays[0].cut()
        lab1.wait_not_live(writer, late)

    grants = after_first_grant(writer, monkeypatch, heartbeats_stop)
    data = random_bytes(MiB + 7, seed=1)
    with writer.fs.open("/f", "wb") as f:
        f.write(data)
    assert len(grants) == 1, "written on the granted worker, no second grant"
    assert late not in lab1.live(writer)                      # still past its lease at the master
    reader = lab1.cluster.client()
    (block,) = reader.master.get_blocks(reader.fs.stat("/f").ino).blocks
    assert block.worker_ids == (late,), "the only copy is listed although its worker is not live"
    with reader.fs.open("/f") as f:
        assert f.read() == data
    lab1.relays[0].restore()
    lab1.cluster.wait_for_live_workers(1)                     # it re-registers by itself


def two_files(lab: Lab, seed: int) -> tuple[str, bytes, bytes]:
    """/two/f with a copy on each worker and /one/f whose every block is only on the worker listed
    first for /two/f's first block (so an order of copies seen below is the master's doing, not
    the stored one). Returns (that worker's id, /two/f's bytes, /one/f's bytes)."""
    writer = lab.cluster.client()
    writer.fs.mkdir("/two")
    writer.fs.set_policy("/two", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
    two, one = random_bytes(3 * MiB + 5, seed=seed), random_bytes(2 * MiB + 3, seed=seed + 1)
    with writer.fs.open("/two/f", "wb") as f:
        f.write(two)
    blocks = writer.master.get_blocks(writer.fs.stat("/two/f").ino).blocks
    assert all(len(b.worker_ids) == 2 for b in blocks)
    first = blocks[0].worker_ids[0]
    local = lab.cluster.client(node=f"node{lab.index_of(first)}")
    local.fs.mkdir("/one")
    local.fs.set_policy("/one", Policy(storage_class=StorageClass.CACHE, replicas=1, block_size=MiB,
                                       placement=PLACEMENT_LOCAL))
    with local.fs.open("/one/f", "wb") as f:
        f.write(one)
    assert {b.worker_ids for b in local.master.get_blocks(local.fs.stat("/one/f").ino).blocks} == {(first,)}
    return first, two, one


def test_copies_on_a_worker_past_its_lease_are_listed_after_the_live_ones_and_read(lab2: Lab) -> None:
    late, two, one = two_files(lab2, seed=2)
    live = lab2.other_than(late)
    lab2.relays[lab2.index_of(late)].cut()
    reader = lab2.cluster.client(node="elsewhere")
    lab2.wait_not_live(reader, late)
    ino_two, ino_one = reader.fs.stat("/two/f").ino, reader.fs.stat("/one/f").ino
    assert all(b.worker_ids == (live, late) for b in reader.master.get_blocks(ino_two).blocks)
    assert all(b.worker_ids == (late,) for b in reader.master.get_blocks(ino_one).blocks)
    with reader.fs.open("/two/f") as f:
        assert f.read() == two
    with reader.fs.open("/one/f") as f:
        assert f.read() == one, "the only copies, on a registered worker past its lease"


def test_a_dead_workers_copy_is_tried_last_and_its_only_copy_fails_clearly(lab2: Lab) -> None:
    dead, two, _one = two_files(lab2, seed=4)
    live = lab2.other_than(dead)
    lab2.workers[lab2.index_of(dead)].kill()
    reader = lab2.cluster.client(node="elsewhere")
    lab2.wait_not_live(reader, dead)
    with reader.fs.open("/two/f") as f:
        assert f.read() == two
    assert not reader.suspects.suspect(dead), "the live copy was read first: the dead worker never tried"
    assert all(b.worker_ids == (live, dead) for b in reader.master.get_blocks(reader.fs.stat("/two/f").ino).blocks)
    started = time.monotonic()
    with pytest.raises(Unavailable), reader.fs.open("/one/f") as f:
        f.read()
    assert time.monotonic() - started < BOUND_S
    assert reader.suspects.suspect(dead), "its only copy was tried and refused"


def test_a_write_granted_to_a_worker_that_died_asks_for_a_new_grant_once(
        lab2: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = lab2.cluster.client()
    victims: list[str] = []

    def dies(grant: AddedBlock) -> None:
        (victim,) = grant.worker_ids                          # replicas 1: one copy
        victims.append(victim)
        lab2.workers[lab2.index_of(victim)].kill()
        lab2.wait_not_live(writer, victim)

    writer.fs.mkdir("/c")
    writer.fs.set_policy("/c", Policy(storage_class=StorageClass.CACHE, replicas=1))
    grants = after_first_grant(writer, monkeypatch, dies)
    data = random_bytes(MiB + 11, seed=6)
    with writer.fs.open("/c/f", "wb") as f:
        f.write(data)
    assert len(grants) == 2, "the first block was given up and a new one granted"
    survivor = next(w for w in (lab2.worker_id(0), lab2.worker_id(1)) if w != victims[0])
    assert grants[1].worker_ids == (survivor,)
    (block,) = writer.master.get_blocks(writer.fs.stat("/c/f").ino).blocks
    assert (block.block_id, block.worker_ids) == (grants[1].block_id, (survivor,))
    with lab2.cluster.client().fs.open("/c/f") as f:
        assert f.read() == data


def test_a_write_whose_only_worker_died_fails_clearly(lab1: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = lab1.cluster.client()
    writer.fs.mkdir("/d")
    with writer.fs.open("/d/before", "wb") as f:
        f.write(b"kept")

    gone_at: list[float] = []

    def dies(_grant: AddedBlock) -> None:
        lab1.workers[0].kill()
        lab1.wait_not_live(writer, lab1.worker_id(0))
        gone_at.append(time.monotonic())

    grants = after_first_grant(writer, monkeypatch, dies)
    f = writer.fs.open("/d/f", "wb")
    with pytest.raises(Unavailable, match="no live workers"):
        f.write(random_bytes(MiB, seed=7))
        f.close()
    assert time.monotonic() - gone_at[0] < BOUND_S, "refused, given up and refused again: no waiting"
    with contextlib.suppress(CurvineError):
        f.close()                                             # the failed handle stays failed
    assert len(grants) == 1, "the second AddBlock was refused by the master: no live worker"
    assert writer.fs.stat("/d/f").size == 0                   # nothing published
    assert writer.fs.stat("/d/before").size == 4


def test_a_file_whose_only_copies_are_on_a_dead_worker_is_not_the_same_content(
        lab2: Lab, tmp_path: pathlib.Path) -> None:
    """`fs load` skips an upload when the stored file has the same content: copies on a worker
    that is registered but not live (maybe dead) must not count, or the upload is skipped and the
    file stays unreadable."""
    dead, _two, one = two_files(lab2, seed=8)
    local = tmp_path / "one"
    local.write_bytes(one)
    reader = lab2.cluster.client(node="elsewhere")
    assert reader.fs.same_content(str(local), "/one/f")
    lab2.workers[lab2.index_of(dead)].kill()
    lab2.wait_not_live(reader, dead)
    assert [b.worker_ids for b in reader.master.get_blocks(reader.fs.stat("/one/f").ino).blocks] == [(dead,)] * 3
    assert not reader.fs.same_content(str(local), "/one/f"), "its only copies are on a worker that is not live"
