"""The worker store's shortcut for repeated reads: stored files kept open with their parsed
headers. It must never change what a reader sees."""
from __future__ import annotations

import os
import pathlib

from curvine_py.core import layout
from curvine_py.worker.store import Store

MiB = 1 << 20


def object_path(store: Store, key: str) -> pathlib.Path:
    name = layout.object_file_name(key)
    return pathlib.Path(store.dirs[0].path, "kv", layout.shard_dir(name), name)


def read_all(store: Store, key: str) -> bytes | None:
    stored = store.open_object(key)
    if stored is None:
        return None
    with stored:
        return stored.read()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


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
