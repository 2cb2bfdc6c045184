"""The worker store's two shortcuts: stored files kept open for repeated reads, and temp files
created ahead of writes (worker/tmpfiles.py). Neither may change what a reader or writer sees."""
from __future__ import annotations

import os
import pathlib
import time

import pytest

from curvine_py.worker import tmpfiles
from curvine_py.worker.store import Store
from curvine_py.worker.tmpfiles import TempFilePool
from tests.unit.test_worker_store import object_path, read_all

MiB = 1 << 20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


# -- stored files kept open --------------------------------------------------------------------

def test_a_hot_object_is_served_without_reopening_its_path(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        data = os.urandom(MiB + 5)
        store.put_object("hot", data)
        assert read_all(store, "hot") == data
        # The path is gone (as if renamed away behind the store's back): the kept fd still serves.
        path = object_path(store, "hot")
        path.rename(tmp_path / "elsewhere")
        assert read_all(store, "hot") == data


def test_deleted_evicted_and_replaced_files_are_never_served_from_the_kept_fds(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        first, second = os.urandom(3000), os.urandom(3000)
        store.put_object("k", first)
        assert read_all(store, "k") == first
        assert store.delete_object("k") is True
        assert store.open_object("k") is None          # a miss, not the kept copy
        store.put_object("k", second)                  # write-once again after the delete
        assert read_all(store, "k") == second

        store.write_block(7, first)
        stored = store.open_block(7)
        assert stored is not None
        with stored:
            assert stored.read() == first
        store.write_block(7, second)                   # a block rewrite replaces atomically
        stored = store.open_block(7)
        assert stored is not None
        with stored:
            assert stored.read() == second

        store.drop_bad(store.object_name("k"))         # what a reported bad copy goes through
        assert store.open_object("k") is None


def test_an_expired_object_is_a_miss_even_when_kept_open(tmp_path: pathlib.Path) -> None:
    now = [1_000_000]
    with Store([(str(tmp_path / "d"), 0)], clock=lambda: now[0]) as store:
        store.put_object("ttl", b"x" * 100, ttl_ms=50)
        assert read_all(store, "ttl") == b"x" * 100
        now[0] += 51
        assert store.open_object("ttl") is None


def test_a_reader_keeps_its_bytes_when_a_kept_file_is_deleted(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        data = os.urandom(2 * MiB)
        store.put_object("k", data)
        assert read_all(store, "k") == data            # now kept open
        stored = store.open_object("k")                # served from the kept fd (a duplicate)
        assert stored is not None
        with stored:
            store.delete_object("k")                   # closes the kept fd, not the reader's
            assert stored.read() == data


def test_kept_fds_are_bounded_and_closed(tmp_path: pathlib.Path) -> None:
    before = open_fds()
    store = Store([(str(tmp_path / "d"), 0)], open_files=3)
    store.open()
    try:
        baseline = open_fds()
        for i in range(10):
            store.put_object(f"k{i}", b"v" * 10)
            assert read_all(store, f"k{i}") == b"v" * 10
        assert open_fds() == baseline + 3              # only the 3 most recently read
        for i in range(10):                            # all still readable, cached or not
            assert read_all(store, f"k{i}") == b"v" * 10
        store.delete_object("k9")                      # kept, now closed
        assert open_fds() == baseline + 2
    finally:
        store.close()
    assert open_fds() == before


def test_kept_files_can_be_turned_off(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)], open_files=0) as store:
        baseline = open_fds()
        store.put_object("k", b"v")
        assert read_all(store, "k") == b"v"
        assert open_fds() == baseline


# -- temp files created ahead ------------------------------------------------------------------

def test_the_pool_keeps_empty_temp_files_ready_and_cleans_up(tmp_path: pathlib.Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pool = TempFilePool([str(tmp)], mode=0o600, depth=3)
    pool.start()
    try:
        wait_until(lambda: pool.ready_count(0) == 3)
        taken = pool.take(0)
        assert taken is not None
        path, fd = taken
        assert os.path.dirname(path) == str(tmp) and path.endswith(tmpfiles.TEMP_SUFFIX)
        assert os.fstat(fd).st_size == 0 and os.stat(path).st_mode & 0o777 == 0o600
        wait_until(lambda: pool.ready_count(0) == 3)   # refilled after a take
    finally:
        pool.close()
    assert sorted(os.listdir(tmp)) == [os.path.basename(path)]   # only the taken one is left
    os.close(fd)


def test_an_empty_or_failing_pool_falls_back_to_creating_inline(tmp_path: pathlib.Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "missing"
    pool = TempFilePool([str(missing)], mode=0o600, depth=2)
    pool.start()
    try:
        for _ in range(5):
            assert pool.take(0) is None                # the thread cannot create: no file, no hang
        wait_until(lambda: "cannot create temp files ahead" in caplog.text)
        missing.mkdir()                                # the dir is back: the pool fills again
        taken = pool.take(0)                           # the caller owns what it takes
        if taken is not None:
            os.close(taken[1])
            os.unlink(taken[0])
        wait_until(lambda: pool.ready_count(0) == 2)
    finally:
        pool.close()
    assert caplog.text.count("cannot create temp files ahead") == 1   # once per failing stretch
    assert os.listdir(missing) == []


def test_store_writes_use_temp_files_made_ahead(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store([(str(tmp_path / "d"), 0)])
    store.open()
    tmp = pathlib.Path(store.dirs[0].path, "tmp")
    try:
        store.start_temp_pool(depth=2)
        wait_until(lambda: len(os.listdir(tmp)) == 2)
        ready = set(os.listdir(tmp))
        inline: list[str] = []
        original = tmpfiles.create_temp

        def counting(tmp_dir: str, mode: int) -> tuple[str, int]:
            inline.append(tmp_dir)
            return original(tmp_dir, mode)

        monkeypatch.setattr("curvine_py.worker.writes.create_temp", counting)
        data = os.urandom(MiB + 1)
        assert store.put_object("a", data) is True
        assert read_all(store, "a") == data
        assert inline == []                            # the write took a ready file
        assert not ready <= set(os.listdir(tmp))       # ... one of those made ahead
        for i in range(5):                             # a burst larger than the pool still works
            store.put_object(f"b{i}", data)
        for i in range(5):
            assert read_all(store, f"b{i}") == data
        with store.begin_put("aborted", 10) as pending:   # an aborted write leaves nothing
            assert pending.length == 10
        wait_until(lambda: len(os.listdir(tmp)) == 2)  # only ready (empty) files are in tmp/
        assert all((tmp / name).stat().st_size == 0 for name in os.listdir(tmp))
    finally:
        store.close()
    assert os.listdir(tmp) == []                       # close removes what was never used
