"""The worker store on real directories: write-once objects, atomic publication, inventory rebuild,
space reservation, integrity, key validation."""
from __future__ import annotations

import errno
import os
import pathlib

import pytest

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt, CurvineError, InvalidArgument, NameTooLong, NoSpace
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE
from curvine_py.worker.evictor import Evictor
from curvine_py.worker.store import Store

MiB = 1 << 20


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def object_path(store: Store, key: str, index: int = 0) -> pathlib.Path:
    name = layout.object_file_name(key)
    return pathlib.Path(store.dirs[index].path, "kv", layout.shard_dir(name), name)


def block_path(store: Store, block_id: int, index: int = 0) -> pathlib.Path:
    name = layout.block_file_name(block_id)
    return pathlib.Path(store.dirs[index].path, "blocks", layout.shard_dir(name), name)


def read_all(store: Store, key: str) -> bytes | None:
    stored = store.open_object(key)
    if stored is None:
        return None
    with stored:
        return stored.read()


def test_put_read_and_the_file_format(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        data = os.urandom(2 * MiB + 3)
        assert store.put_object("key/with/../slashes", data, user_meta=b"meta", ttl_ms=0) is True
        assert read_all(store, "key/with/../slashes") == data
        path = object_path(store, "key/with/../slashes")
        raw = path.read_bytes()
        header = layout.StoredHeader.decode(raw[:layout.PAGE * 4])
        assert header.key == "key/with/../slashes" and header.user_meta == b"meta"
        assert header.header_size % layout.PAGE == 0 and raw[header.header_size:] == data
        assert header.chunk_checksums == tuple(layout.chunk_digests(data))
        assert header.checksum == layout.object_checksum(data)
        assert header.storage_class == CACHE   # unspecified KV class = cache
        assert os.listdir(tmp_path / "d" / "tmp") == []
        assert store.stats().objects == 1 and store.stats().used == len(raw)


def test_reput_keeps_the_first_copy(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        assert store.put_object("k", b"one") is True
        assert store.put_object("k", b"two, longer") is False
        assert read_all(store, "k") == b"one"


def test_concurrent_writers_of_one_key_keep_one_copy(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        first = store.begin_put("race", 5)
        second = store.begin_put("race", 6)
        assert first is not None and second is not None
        with first, second:
            first.receive(lambda v: v.__setitem__(slice(None), b"first"))
            second.receive(lambda v: v.__setitem__(slice(None), b"second"))
            assert second.commit() is True
            assert first.commit() is False
        assert read_all(store, "race") == b"second"
        assert store.dirs[0].reserved == 0 and os.listdir(tmp_path / "d" / "tmp") == []


def test_checksum_mismatch_stores_nothing(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        with pytest.raises(Corrupt):
            store.put_object("k", b"x" * 3 * MiB, checksum=1)
        assert read_all(store, "k") is None
        assert os.listdir(tmp_path / "d" / "tmp") == [] and store.dirs[0].reserved == 0


def test_keys_are_validated(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)], max_key_bytes=16) as store:
        with pytest.raises(InvalidArgument):
            store.put_object("a\x00b", b"x")
        with pytest.raises(InvalidArgument):
            store.open_object("")
        with pytest.raises(NameTooLong):
            store.put_object("é" * 9, b"x")   # 18 bytes of UTF-8
        with pytest.raises(InvalidArgument):
            store.put_object("ok", b"x", user_meta=b"m" * (layout.MAX_USER_META + 1))
        assert store.put_object("é" * 8, b"x") is True


def test_inventory_is_rebuilt_and_bad_files_removed(tmp_path: pathlib.Path) -> None:
    spec = [(str(tmp_path / "d"), 0)]
    with Store(spec) as store:
        store.put_object("keep", b"k" * 5000, ttl_ms=60_000)
        store.put_object("truncated", b"t" * 5000)
        store.write_block(0x1234, b"b" * (MiB + 1), storage_class=CACHE)
        store.write_block(0x99, b"durable block")
        truncated = object_path(store, "truncated")
        block = block_path(store, 0x99)
    os.truncate(truncated, os.path.getsize(truncated) - 1)
    (tmp_path / "d" / "tmp" / "leftover.tmp").write_bytes(b"partial")
    garbage = tmp_path / "d" / "kv" / "ab" / "0000000000000000000000000000ffab"
    garbage.parent.mkdir(exist_ok=True)
    garbage.write_bytes(b"not a curvine object")
    misnamed = block.with_name(layout.block_file_name(0x199))   # same shard; the header says 0x99
    misnamed.write_bytes(block.read_bytes())
    with Store(spec) as store:
        assert read_all(store, "keep") == b"k" * 5000
        assert read_all(store, "truncated") is None and not truncated.exists()
        assert not garbage.exists() and not misnamed.exists()
        assert os.listdir(tmp_path / "d" / "tmp") == []
        assert sorted(store.block_ids()) == [0x99, 0x1234]
        blk = store.open_block(0x1234)
        assert blk is not None
        with blk:
            assert blk.read() == b"b" * (MiB + 1) and blk.header.storage_class == CACHE
        assert store.stats().blocks == 2 and store.stats().objects == 1


def test_a_data_dir_serves_one_worker(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]):
        with pytest.raises(CurvineError) as info:
            Store([(str(tmp_path / "d"), 0)]).open()
        assert info.value.errno == errno.EBUSY
    with Store([(str(tmp_path / "d"), 0)]):   # released on close
        pass


def test_worker_id_is_generated_once(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        first = store.load_worker_id()
        assert len(first) == 16 and first.isalnum()
    with Store([(str(tmp_path / "d"), 0)]) as store:
        assert store.load_worker_id() == first


def test_durable_write_over_capacity_is_nospace(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 3 * MiB)]) as store:
        Evictor(store, high=0.9, low=0.5)
        store.put_object("a", b"a" * MiB, storage_class=DURABLE)
        with pytest.raises(NoSpace):
            store.put_object("b", b"b" * (2 * MiB), storage_class=DURABLE)
        assert read_all(store, "a") is not None and read_all(store, "b") is None
        assert os.listdir(tmp_path / "d" / "tmp") == [] and store.dirs[0].reserved == 0


def test_write_evicts_lru_cache_data_to_make_room(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    with Store([(str(tmp_path / "d"), 10 * MiB)], clock=clock) as store:
        Evictor(store, high=0.9, low=0.5)
        for i in range(8):
            clock.now += 1
            store.put_object(f"c{i}", b"c" * MiB)
        clock.now += 1
        assert read_all(store, "c0") is not None   # c0 becomes recently used
        clock.now += 1
        store.put_object("new", b"n" * (2 * MiB))
        assert read_all(store, "new") is not None and read_all(store, "c0") is not None
        assert read_all(store, "c1") is None        # least recently used went first
        used, capacity = store.dirs[0].pressure()
        assert used <= 0.5 * capacity
        assert store.evictions > 0


def test_nothing_is_evicted_when_it_would_not_help(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 4 * MiB)]) as store:
        Evictor(store, high=0.9, low=0.5)
        store.put_object("cache", b"c" * MiB)
        with pytest.raises(NoSpace):
            store.put_object("huge", b"h" * (5 * MiB))
        assert read_all(store, "cache") is not None and store.evictions == 0


def test_new_objects_go_to_the_dir_with_most_room(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "a"), 4 * MiB), (str(tmp_path / "b"), 8 * MiB)]) as store:
        store.put_object("first", b"1" * MiB)
        assert object_path(store, "first", 1).exists()
        store.put_object("second", b"2" * (3 * MiB))
        store.put_object("third", b"3" * MiB)
        assert object_path(store, "third", 0).exists()   # b has 8-1-3 = 4 MiB left, a has 4 MiB
        usage = store.usage()
        assert usage.capacity == 12 * MiB and usage.used == store.stats().used


def test_block_rewrite_across_dirs_leaves_one_copy(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "a"), 4 * MiB), (str(tmp_path / "b"), 4 * MiB)]) as store:
        store.write_block(5, b"x" * MiB)
        first_dir = 0 if block_path(store, 5, 0).exists() else 1
        store.write_block(5, b"y" * 10)
        assert [block_path(store, 5, i).exists() for i in (0, 1)].count(True) == 1
        assert not block_path(store, 5, first_dir).exists()
        blk = store.open_block(5)
        assert blk is not None
        with blk:
            assert blk.read() == b"y" * 10
        assert store.stats().blocks == 1


def test_range_digests_match_what_a_reader_computes(tmp_path: pathlib.Path) -> None:
    data = os.urandom(3 * MiB + 1000)
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.write_block(1, data)
        blk = store.open_block(1)
        assert blk is not None
        with blk:
            for offset, length in ((0, len(data)), (MiB, MiB), (MiB, 10), (3 * MiB, 1000), (5, 2 * MiB),
                                   (len(data), 0)):
                piece = data[offset:offset + length]
                assert blk.range_digests(offset, length) == layout.chunk_digests(piece), (offset, length)
            assert blk.verify()


def test_open_fd_survives_delete(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.put_object("k", b"v" * 10_000)
        stored = store.open_object("k")
        assert stored is not None
        assert store.delete_object("k") is True and store.delete_object("k") is False
        with stored:
            assert stored.read() == b"v" * 10_000
        assert store.open_object("k") is None


def test_expired_objects_are_misses_before_the_evictor_runs(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    with Store([(str(tmp_path / "d"), 0)], clock=clock) as store:
        store.put_object("ttl", b"x", ttl_ms=100)
        assert store.exists(["ttl"]) == 1
        clock.now += 100
        assert store.exists(["ttl"]) == 0 and store.open_object("ttl") is None
        assert store.put_object("ttl", b"fresh") is True   # an expired key may be written again
        assert read_all(store, "ttl") == b"fresh"


def test_fallocate_enospc_is_nospace(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        def full(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "posix_fallocate", full)
        with pytest.raises(NoSpace):
            store.put_object("k", b"x" * 100, storage_class=DURABLE)
        assert os.listdir(tmp_path / "d" / "tmp") == [] and store.dirs[0].reserved == 0


def test_fallocate_enospc_evicts_cache_data_and_retries(tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # No free-space reserve here: with one, a file system with 0 bytes free refuses the write
    # outright (tests/integration/test_worker_reserve.py); this is about the fallocate retry.
    with Store([(str(tmp_path / "d"), 0)], free_space_ratio=0) as store:
        Evictor(store, high=0.9, low=0.5)
        store.put_object("cache", b"c" * MiB)
        store.put_object("durable", b"d" * MiB, storage_class=DURABLE)
        real = os.posix_fallocate
        calls: list[int] = []

        def full_once(fd: int, offset: int, length: int) -> None:
            calls.append(length)
            if len(calls) == 1:   # someone else filled the shared filesystem meanwhile
                raise OSError(errno.ENOSPC, "No space left on device")
            real(fd, offset, length)

        # statvfs said there was room when the write was admitted, and says 0 free afterwards
        monkeypatch.setattr(store.dirs[0], "disk", lambda: (100 * MiB, 0 if calls else 50 * MiB))
        monkeypatch.setattr(os, "posix_fallocate", full_once)
        assert store.put_object("new", b"n" * 1000, storage_class=DURABLE) is True
        assert len(calls) == 2
        assert read_all(store, "cache") is None and read_all(store, "durable") is not None
        assert read_all(store, "new") == b"n" * 1000


def test_a_failed_publish_leaves_nothing(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        def broken(src: str, dst: str) -> None:
            raise OSError(errno.EIO, "Input/output error")
        monkeypatch.setattr(os, "rename", broken)
        with pytest.raises(OSError):
            store.put_object("k", b"x" * 100)
        assert os.listdir(tmp_path / "d" / "tmp") == [] and store.dirs[0].reserved == 0
        assert store.stats().objects == 0


def test_durable_files_reach_stable_storage_before_they_are_stored(tmp_path: pathlib.Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A durable-class write is fsynced (file, then both directories of its rename) before the
    commit returns; a cache-class one is not (a power cut costs a miss, not a lie)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.put_object("cached", b"x" * 100)
        assert synced == []
        store.write_block(7, b"y" * (MiB + 1), storage_class=DURABLE)
        final = block_path(store, 7)
        assert synced[0].startswith(str(tmp_path / "d" / "tmp")), "the file's data, before its rename"
        assert synced[1:] == [str(final.parent), str(tmp_path / "d" / "tmp")]
        assert final.stat().st_size > MiB
