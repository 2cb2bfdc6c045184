"""Scrubbing on a real store: a flipped bit in a block file is found by the SCRUB op and by the
background scrubber (dropped, reported bad), good copies are kept and their LRU order untouched,
the scrub rate is held (fake clock), and a copy rewritten meanwhile is never dropped."""
from __future__ import annotations

import errno
import os
import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.core import frames, layout
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.scrub import Scrubber, Verdict, scrub
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store
from tests.unit.test_worker_server import WireClient

MiB = 1 << 20
Op = frames.Op


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    now = [1_000_000]
    with Store([(str(tmp_path / "d"), 0)], clock=lambda: now[0]) as s:
        yield s


def block_path(store: Store, block_id: int) -> str:
    name = layout.block_file_name(block_id)
    return os.path.join(store.dirs[0].path, "blocks", layout.shard_dir(name), name)


def object_path(store: Store, key: str) -> str:
    name = layout.object_file_name(key)
    return os.path.join(store.dirs[0].path, "kv", layout.shard_dir(name), name)


def flip_bit(path: str, from_end: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(-from_end, os.SEEK_END)
        byte = fh.read(1)[0]
        fh.seek(-from_end, os.SEEK_END)
        fh.write(bytes([byte ^ 0x10]))


def test_a_flipped_bit_in_a_block_is_found_dropped_and_reported(store: Store) -> None:
    store.write_block(1, os.urandom(3 * MiB))
    store.write_block(2, os.urandom(3 * MiB))
    flip_bit(block_path(store, 2), 2 * MiB)                      # in the middle chunk
    assert scrub(store, store.block_name(1)).verdict is Verdict.GOOD
    result = scrub(store, store.block_name(2))
    assert result.verdict is Verdict.CORRUPT and "chunk 1" in result.reason
    assert not store.contains_block(2) and not os.path.exists(block_path(store, 2))
    assert store.take_reports() == ([], [2])                     # for the next heartbeat
    assert scrub(store, store.block_name(2)).verdict is Verdict.ABSENT
    assert store.contains_block(1)


def test_truncated_and_object_copies_are_corrupt_too(store: Store) -> None:
    store.write_block(3, b"x" * 5000)
    os.truncate(block_path(store, 3), os.path.getsize(block_path(store, 3)) - 1)
    assert scrub(store, store.block_name(3)).verdict is Verdict.CORRUPT
    store.put_object("kv", b"y" * 5000)
    flip_bit(object_path(store, "kv"), 1)
    assert scrub(store, store.object_name("kv")).verdict is Verdict.CORRUPT
    assert store.exists(["kv"]) == 0
    assert store.take_reports() == ([], [3])                     # objects are not the master's


def test_the_scrub_op_on_the_data_plane(store: Store) -> None:
    server = DataServer(store, WorkerState("w1"), host="127.0.0.1", port=0, token="", max_payload=16 * MiB)
    address = server.start()
    try:
        with WireClient(address) as c:
            data = os.urandom(2 * MiB + 5)
            c.call(Op.WRITE_BLOCK, DataHeader(block_id=7), data)
            c.put("obj", b"o" * 100)
            good = c.call(Op.SCRUB, DataHeader(block_id=7))
            assert good.found and good.length == len(data) and good.checksum == layout.object_checksum(data)
            assert c.call(Op.SCRUB, DataHeader(key="obj")).found
            assert c.call(Op.SCRUB, DataHeader(block_id=8)).found is False      # not here: not an error
            flip_bit(block_path(store, 7), 3)
            reply, _ = c.exchange(Op.SCRUB, DataHeader(block_id=7))
            assert reply.errno == errno.EIO and "dropped" in reply.message
            reply, _ = c.exchange(Op.READ_BLOCK, DataHeader(block_id=7))
            assert reply.errno == errno.ENOENT                                    # never served
            reply, _ = c.exchange(Op.SCRUB, DataHeader(key=""))                   # block 0: absent
            assert reply.errno == 0 and not reply.found
            assert store.take_reports() == ([], [7])
    finally:
        server.stop()


class FakeTime:
    def __init__(self) -> None:
        self.now = 50.0
        self.slept = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.slept += seconds
        self.now += seconds
        return False


def test_the_background_scrubber_holds_its_rate_and_keeps_the_lru_order(store: Store) -> None:
    for block_id in range(1, 5):
        store.write_block(block_id, os.urandom(MiB))
    flip_bit(block_path(store, 3), 100)
    before = {c.name: c.last_access_ms for c in store.candidates(0)}
    fake = FakeTime()
    scrubber = Scrubber(store, rate=MiB, clock=fake.clock, sleep=fake.sleep)
    this = scrubber.run_pass()
    assert (this.files, this.corrupt) == (4, 1) and this.bytes == 3 * MiB     # the bad chunk is not counted
    assert 2.9 <= fake.slept <= 3.0                              # 3 MiB at 1 MiB/s
    assert store.block_ids() == [1, 2, 4] and store.take_reports() == ([], [3])
    after = {c.name: c.last_access_ms for c in store.candidates(0)}
    assert after == {name: t for name, t in before.items() if name in after}   # not an access
    again = scrubber.run_pass()
    assert (again.files, again.corrupt) == (3, 0) and scrubber.stats.passes == 2


def test_stopping_ends_a_pass_at_once(store: Store) -> None:
    for block_id in range(1, 4):
        store.write_block(block_id, os.urandom(MiB))
    fake = FakeTime()
    scrubber = Scrubber(store, rate=1024, clock=fake.clock, sleep=lambda seconds: True)
    this = scrubber.run_pass()
    assert this.files == 0 and this.bytes == MiB                 # told to stop while pacing the first


def test_a_copy_rewritten_meanwhile_is_not_dropped(store: Store) -> None:
    store.write_block(5, b"old" * 1000)
    opened = store.open_entry(store.block_name(5))
    assert opened is not None
    entry, stored = opened
    stored.close()
    store.write_block(5, b"new" * 1000)                          # replaced while "being verified"
    assert store.drop_if_current(store.block_name(5), entry) is False
    assert store.contains_block(5) and store.take_reports() == ([], [])


def test_a_negative_rate_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        Scrubber(store, rate=-1)


def test_a_bad_read_drops_only_the_copy_it_read(store: Store) -> None:
    store.write_block(6, os.urandom(2 * MiB))
    flip_bit(block_path(store, 6), 10)
    stale = store.open_block(6)
    assert stale is not None
    store.write_block(6, b"rewritten, good")                    # replaced after the bad copy was opened
    with stale:
        store.drop_bad(store.block_name(6), stale)              # what READ_BLOCK does on a bad range
    assert store.contains_block(6) and store.take_reports() == ([], [])
    current = store.open_block(6)
    assert current is not None
    with current:
        store.drop_bad(store.block_name(6), current)            # the copy it names: dropped
    assert not store.contains_block(6) and store.take_reports() == ([], [6])
