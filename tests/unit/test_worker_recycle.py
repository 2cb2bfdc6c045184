"""Freed files reused by later writes (worker/recycle.py): a reused file never shows a reader the
bytes of the object it held, a reader that still has the old object open keeps reading it, a failed
write on a reused file publishes nothing, and the kept files never cost space or survive a restart."""
from __future__ import annotations

import errno
import fcntl
import os
import pathlib

import pytest

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt
from curvine_py.worker.recycle import FREED_SUFFIX
from curvine_py.worker.store import Store
from curvine_py.worker.writes import copier
from tests.harness import wait_until
from tests.unit.test_worker_store import block_path, object_path, read_all

MiB = 1 << 20


def freed_in(store: Store, index: int = 0) -> list[str]:
    return sorted(p for p in os.listdir(os.path.join(store.dirs[index].path, "tmp")) if p.endswith(FREED_SUFFIX))


def reaped(store: Store, index: int = 0) -> None:
    """Waits until the reaper's thread has unlinked what it was given (reaper.py)."""
    wait_until(lambda: store.dirs[index].reaping == 0, 10.0, "the reaper's unlinks")


def test_a_deleted_objects_file_is_overwritten_by_the_next_put_and_reads_only_the_new_bytes(
        tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        old, new = os.urandom(MiB + 4096), os.urandom(MiB + 4096)
        store.put_object("old", old)
        old_inode = object_path(store, "old").stat().st_ino
        assert store.delete_object("old") is True
        assert len(freed_in(store)) == 1
        assert store.open_object("old") is None
        store.put_object("new", new)
        assert store.freed.reused == 1 and freed_in(store) == []
        assert object_path(store, "new").stat().st_ino == old_inode   # the same file, rewritten
        assert read_all(store, "new") == new
        stored = store.open_object("new")
        assert stored is not None
        with stored:
            stored.verify_summary()       # exactly header + payload: nothing of the old one left
            assert stored.verify()


def test_a_smaller_freed_file_is_grown_to_the_new_object(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.put_object("old", os.urandom(5000))
        store.delete_object("old")
        new = os.urandom(2 * MiB + 1)
        store.put_object("new", new)
        assert store.freed.reused == 1
        header = layout.StoredHeader.decode(object_path(store, "new").read_bytes()[:64 * 4096])
        assert object_path(store, "new").stat().st_size == header.header_size + len(new)
        assert read_all(store, "new") == new


def test_a_larger_freed_file_is_not_cut_on_the_request_path_but_kept_for_its_size(tmp_path: pathlib.Path) -> None:
    """Cutting it would free blocks in the put (a synchronous discard on the bench machine)."""
    with Store([(str(tmp_path / "d"), 0)]) as store:
        big = os.urandom(3 * MiB + 7)
        store.put_object("old", big)
        store.delete_object("old")
        kept = freed_in(store)
        store.put_object("small", os.urandom(5000))       # a new temp file, the big one untouched
        assert store.freed.reused == 0 and freed_in(store) == kept
        store.put_object("same", big)                      # a put of its size takes it
        assert store.freed.reused == 1 and freed_in(store) == []
        assert read_all(store, "same") == big


def test_the_newest_file_of_the_very_size_is_taken_before_a_smaller_one(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        for key, size in (("a", 5000), ("b", MiB), ("c", 2 * MiB)):
            store.put_object(key, os.urandom(size))
        inodes = {key: object_path(store, key).stat().st_ino for key in "abc"}
        for key in "abc":
            store.delete_object(key)
        store.put_object("n1", os.urandom(MiB))           # its size: b's file
        store.put_object("n2", os.urandom(MiB + 5))       # none of its size: the largest below, b gone
        assert object_path(store, "n1").stat().st_ino == inodes["b"]
        assert object_path(store, "n2").stat().st_ino == inodes["a"]
        assert store.freed.reused == 2 and len(freed_in(store)) == 1   # c's, larger than both


def test_a_file_a_reader_still_has_open_is_not_reused_and_the_reader_keeps_its_bytes(
        tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)], open_files=0) as store:
        old = os.urandom(2 * MiB)
        store.put_object("old", old)
        reader = store.open_object("old")     # as an in-flight GET or a short-circuit client holds it
        assert reader is not None
        store.delete_object("old")
        store.put_object("new", os.urandom(2 * MiB))
        assert store.freed.reused == 0 and store.freed.still_open == 1
        reaped(store)
        assert freed_in(store) == []          # let go of (unlinked), not put back
        with reader:
            assert reader.read() == old
            assert reader.verify()


def test_the_fd_cache_of_the_read_path_does_not_hold_a_freed_file(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.put_object("hot", os.urandom(5000))
        assert read_all(store, "hot")          # now kept open in the fd cache
        store.delete_object("hot")             # which closes it: the file is alone
        store.put_object("next", os.urandom(5000))
        assert store.freed.reused == 1


def test_a_failed_write_on_a_reused_file_publishes_nothing_and_the_file_is_gone(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        old = os.urandom(3 * MiB)
        store.put_object("old", old)
        store.delete_object("old")
        new = os.urandom(3 * MiB)
        pending = store.begin_put("new", len(new), checksum=layout.checksum(b"something else"))
        assert pending is not None and store.freed.reused == 1
        with pytest.raises(Corrupt), pending:
            pending.receive(copier(new))
        assert store.open_object("new") is None and store.open_object("old") is None
        reaped(store)
        assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
        # A payload cut short (the peer died mid-payload) is the same abort.
        store.put_object("old2", old)
        store.delete_object("old2")
        pending = store.begin_put("half", len(new))
        assert pending is not None

        def fill(view: memoryview) -> None:
            raise ConnectionError("peer gone")
        with pytest.raises(ConnectionError), pending:
            pending.receive(fill)
        assert store.open_object("half") is None
        reaped(store)
        assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
        assert store.dirs[0].reserved == 0


def only_this_dir_on_the_disk(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    """statvfs as if `root` were alone on an 8 GiB disk: its free space falls by what the files
    under `root` occupy and by nothing else (other tests write to the same file system at once,
    which made a comparison of the real free space flaky)."""
    real = os.statvfs

    def statvfs(path: str) -> os.statvfs_result:
        st = real(path)
        occupied = sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, names in os.walk(root) for f in names)
        free = ((8 << 30) - occupied) // st.f_frsize
        return os.statvfs_result((st.f_bsize, st.f_frsize, (16 << 30) // st.f_frsize, free, free,
                                  st.f_files, st.f_ffree, st.f_favail, st.f_flag, st.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)


def test_kept_files_count_as_free_space_and_a_restart_sweeps_them(tmp_path: pathlib.Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "d")
    only_this_dir_on_the_disk(monkeypatch, root)
    with Store([(root, 0)]) as store:
        before = store.usage().available
        store.put_object("a", os.urandom(MiB))
        store.delete_object("a")
        assert store.dirs[0].kept == store.freed.kept_bytes(0) > MiB
        assert store.dirs[0].used == 0
        # Free space seen by the evictor and the master does not shrink by the kept file.
        assert abs(store.usage().available - before) < MiB
        leftover = os.path.join(root, "tmp", freed_in(store)[0])
        os.link(leftover, os.path.join(root, "tmp", "crash" + FREED_SUFFIX))   # as if the worker had died
    assert os.listdir(os.path.join(root, "tmp")) == ["crash" + FREED_SUFFIX]   # close drained its own
    with Store([(root, 0)]) as store:
        assert os.listdir(os.path.join(root, "tmp")) == []
        assert store.dirs[0].kept == 0 and store.open_object("a") is None


def test_the_kept_files_are_bounded_in_count_and_bytes(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 64 * MiB)]) as store:   # 1/16 of 64 MiB: 4 MiB kept at most
        store.freed.max_files = 3
        for i in range(5):
            store.put_object(f"s{i}", os.urandom(1000))
        for i in range(5):
            store.delete_object(f"s{i}")
        assert len(freed_in(store)) == 3
        store.freed.drain(0)
        for i in range(3):
            store.put_object(f"b{i}", os.urandom(3 * MiB))
        for i in range(3):
            store.delete_object(f"b{i}")
        assert len(freed_in(store)) == 1 and store.freed.kept_bytes(0) <= 4 * MiB


def test_bad_copies_are_never_kept_for_reuse(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.put_object("bad", os.urandom(5000))
        store.drop_bad(store.object_name("bad"))
        assert freed_in(store) == []


def test_a_write_refused_for_space_drains_the_kept_files_before_failing(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        for key in ("a", "c"):
            store.put_object(key, os.urandom(MiB))
        for key in ("a", "c"):
            store.delete_object(key)
        assert len(freed_in(store)) == 2
        calls: list[int] = []
        real = os.posix_fallocate

        def full_once(fd: int, offset: int, length: int) -> None:
            calls.append(length)
            if len(calls) == 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            real(fd, offset, length)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "posix_fallocate", full_once)
            store.put_object("b", os.urandom(2 * MiB))    # takes one (smaller: fallocates), full
        assert len(calls) == 2 and freed_in(store) == [] and store.dirs[0].kept == 0
        assert read_all(store, "b")


def test_where_leases_are_refused_nothing_is_reused(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.put_object("a", os.urandom(5000))
        store.delete_object("a")
        real = fcntl.fcntl

        def no_leases(fd: int, cmd: int, arg: int = 0) -> int:
            if cmd == fcntl.F_SETLEASE:
                raise OSError(errno.EINVAL, "Invalid argument")
            return int(real(fd, cmd, arg))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fcntl, "fcntl", no_leases)
            data = os.urandom(5000)
            store.put_object("b", data)
        assert store.freed.enabled is False and store.freed.reused == 0 and freed_in(store) == []
        store.delete_object("b")
        reaped(store)
        assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []   # unlinked, by the reaper


def test_max_files_0_keeps_nothing(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.freed.max_files = 0
        store.put_object("a", os.urandom(5000))
        store.delete_object("a")
        reaped(store)
        assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == [] and store.dirs[0].kept == 0


def test_a_rewritten_blocks_old_file_is_kept_for_reuse_not_freed_by_the_rename(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)], open_files=0) as store:
        old, new = os.urandom(MiB), os.urandom(MiB)
        store.write_block(7, old)
        old_inode = block_path(store, 7).stat().st_ino
        reader = store.open_block(7)           # a reader of the old copy, as a READ_BLOCK in flight
        assert reader is not None
        store.write_block(7, new)              # replaced atomically
        [kept] = freed_in(store)
        assert os.stat(os.path.join(store.dirs[0].path, "tmp", kept)).st_ino == old_inode
        stored = store.open_block(7)
        assert stored is not None
        with stored:
            assert stored.read() == new
        with reader:
            assert reader.read() == old        # the old bytes, for whoever had them open
        store.write_block(8, os.urandom(MiB))  # the old file is free now: overwritten by the next write
        assert store.freed.reused == 1 and freed_in(store) == []


def test_a_rewritten_blocks_old_file_beyond_the_bounds_goes_to_the_reaper(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.freed.max_files = 0
        store.write_block(7, os.urandom(5000))
        store.write_block(7, b"second")
        reaped(store)
        assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
        stored = store.open_block(7)
        assert stored is not None
        with stored:
            assert stored.read() == b"second"
