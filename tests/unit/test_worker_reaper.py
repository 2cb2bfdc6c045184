"""The background unlinks of freed files (worker/reaper.py): a freed file leaves the namespace at once,
counts as free space until its unlink, is unlinked by the reaper's thread (not the request's), and
nothing queued survives a close or a restart."""
from __future__ import annotations

import os
import pathlib
import threading

import pytest

from curvine_py.worker.datadir import TMP, DataDir
from curvine_py.worker.reaper import GONE_SUFFIX, Reaper
from curvine_py.worker.recycle import FreedFiles
from curvine_py.worker.store import Store
from tests.harness import wait_until
from tests.unit.test_worker_store import object_path

MiB = 1 << 20


def data_dirs(tmp_path: pathlib.Path, count: int = 1) -> list[DataDir]:
    dirs = [DataDir(str(tmp_path / f"d{i}"), 0) for i in range(count)]
    for d in dirs:
        os.makedirs(os.path.join(d.path, TMP))
    return dirs


def a_file(data_dir: DataDir, name: str, size: int) -> str:
    path = os.path.join(data_dir.path, name)
    with open(path, "wb") as fh:
        fh.write(os.urandom(size))
    return path


def test_a_queued_file_leaves_its_name_at_once_and_counts_as_free_until_it_is_unlinked(
        tmp_path: pathlib.Path) -> None:
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d])
    reaper.start(background=False)      # queued, not unlinked: the state between the two
    path = a_file(d, "obj", MiB)
    assert reaper.queue(0, path, MiB) is True
    assert not os.path.exists(path)
    [gone] = os.listdir(os.path.join(d.path, TMP))
    assert gone.endswith(GONE_SUFFIX)
    assert d.reaping == MiB and reaper.pending(0) == MiB
    with pytest.MonkeyPatch.context() as mp:   # the same statvfs: free space to us grew by the file
        st = os.statvfs(d.path)
        mp.setattr(os, "statvfs", lambda _path: st)
        assert d.disk()[1] == st.f_bavail * st.f_frsize + MiB
    assert reaper.reap() == 1
    assert os.listdir(os.path.join(d.path, TMP)) == [] and d.reaping == 0 and reaper.pending(0) == 0


def test_before_start_nothing_is_taken_and_the_caller_unlinks(tmp_path: pathlib.Path) -> None:
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d])
    path = a_file(d, "obj", 4096)
    assert reaper.queue(0, path, 4096) is False
    assert os.path.exists(path) and d.reaping == 0


def test_a_full_queue_hands_the_unlink_back_to_the_caller(tmp_path: pathlib.Path) -> None:
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d], max_queued=2)
    reaper.start(background=False)
    paths = [a_file(d, f"f{i}", 4096) for i in range(3)]
    assert [reaper.queue(0, p, 4096) for p in paths] == [True, True, False]
    assert os.path.exists(paths[2]) and d.reaping == 8192
    reaper.reap()
    assert reaper.queue(0, paths[2], 4096) is True


def test_a_missing_file_is_not_taken(tmp_path: pathlib.Path) -> None:
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d])
    reaper.start(background=False)
    assert reaper.queue(0, os.path.join(d.path, "nothing-here"), 4096) is False
    assert d.reaping == 0 and reaper.pending(0) == 0


def test_drain_unlinks_only_the_queued_files_of_its_dir_on_the_callers_thread(tmp_path: pathlib.Path) -> None:
    d0, d1 = data_dirs(tmp_path, 2)
    reaper = Reaper([d0, d1])
    reaper.start(background=False)
    reaper.queue(0, a_file(d0, "a", 5000), 5000)
    reaper.queue(1, a_file(d1, "b", 7000), 7000)
    assert reaper.drain(0) == 5000
    assert os.listdir(os.path.join(d0.path, TMP)) == [] and d0.reaping == 0
    assert len(os.listdir(os.path.join(d1.path, TMP))) == 1 and d1.reaping == 7000
    assert reaper.drain(0) == 0


def test_close_unlinks_whatever_is_still_queued(tmp_path: pathlib.Path) -> None:
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d])
    reaper.start(background=False)
    for i in range(3):
        reaper.queue(0, a_file(d, f"f{i}", 4096), 4096)
    reaper.close()
    assert os.listdir(os.path.join(d.path, TMP)) == [] and d.reaping == 0
    assert reaper.queue(0, a_file(d, "late", 4096), 4096) is False   # closed: the caller unlinks


def test_a_freed_drain_for_space_includes_the_files_queued_for_the_reaper(tmp_path: pathlib.Path) -> None:
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d])
    reaper.start(background=False)
    freed = FreedFiles([d], max_files=0, reaper=reaper)   # keeps nothing: every retire goes to the reaper
    assert freed.retire(0, a_file(d, "x", 8192), 8192) is True
    assert d.reaping == 8192 and d.kept == 0
    assert freed.drain(0) == 8192
    assert os.listdir(os.path.join(d.path, TMP)) == [] and d.reaping == 0


def test_a_delete_over_the_kept_bounds_is_unlinked_by_the_reapers_thread(tmp_path: pathlib.Path) -> None:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.freed.max_files = 0
        store.put_object("a", os.urandom(MiB))
        path = str(object_path(store, "a"))
        unlinked_by: list[str] = []
        real = os.unlink

        def recording(target: str, *args: object, **kwargs: object) -> None:
            if str(target).endswith(GONE_SUFFIX):
                unlinked_by.append(threading.current_thread().name)
            real(target)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "unlink", recording)
            assert store.delete_object("a") is True
            assert not os.path.exists(path) and store.open_object("a") is None
            wait_until(lambda: store.dirs[0].reaping == 0, 10.0, "the reaper's unlink")
        assert unlinked_by == ["reaper"]
        assert os.listdir(os.path.join(store.dirs[0].path, TMP)) == []


def test_a_restart_sweeps_files_a_crash_left_queued(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path / "d")
    with Store([(root, 0)]) as store:
        store.put_object("a", os.urandom(5000))
    leftover = os.path.join(root, TMP, "crash" + GONE_SUFFIX)   # as if the worker died before the unlink
    with open(leftover, "wb") as fh:
        fh.write(b"x" * 5000)
    with Store([(root, 0)]) as store:
        assert os.listdir(os.path.join(root, TMP)) == []
        assert store.dirs[0].reaping == 0 and store.open_object("a") is not None


def test_a_delete_returns_and_the_store_serves_while_the_disk_still_works_on_the_unlink(
        tmp_path: pathlib.Path) -> None:
    """The discard of a freed file's blocks (a synchronous one on the bench machine) is no longer
    waited for under the store lock: with the reaper's unlink held, other requests go on."""
    with Store([(str(tmp_path / "d"), 0)]) as store:
        store.freed.max_files = 0
        store.put_object("old", os.urandom(MiB))
        store.put_object("other", b"still here")
        entered, release = threading.Event(), threading.Event()
        served_meanwhile: list[bool] = []
        real = os.unlink

        def slow(target: str, *args: object, **kwargs: object) -> None:
            if str(target).endswith(GONE_SUFFIX):
                entered.set()
                # Were the requests below answered while this unlink was still in progress? (If the
                # store lock were held here, they could not be: this wait would run out first.)
                served_meanwhile.append(release.wait(10))
            real(target)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "unlink", slow)
            try:
                assert store.delete_object("old") is True
                assert entered.wait(10)                          # the reaper is inside the unlink
                assert store.put_object("new", b"fresh") is True
                stored = store.open_object("other")
                assert stored is not None
                with stored:
                    assert stored.read() == b"still here"
                assert store.dirs[0].reaping > 0
            finally:
                release.set()
            wait_until(lambda: store.dirs[0].reaping == 0, 10.0, "the reaper's unlink")
        assert served_meanwhile == [True]


def test_a_file_unlinked_while_the_free_space_is_read_is_never_missed(tmp_path: pathlib.Path) -> None:
    """The reaper's thread may finish a file (unlink, then uncount) while a write reads the free
    space: the statvfs then still shows the file allocated. Counted neither there nor in `reaping`,
    the write would be told ENOSPC with the room there (CI failed so in
    test_full_disk_gives_enospc_and_nothing_half_written)."""
    [d] = data_dirs(tmp_path)
    reaper = Reaper([d])
    reaper.start(background=False)
    assert reaper.queue(0, a_file(d, "obj", MiB), MiB) is True
    before = os.statvfs(d.path)   # the file still allocated

    def statvfs_while_the_reaper_finishes(_path: str) -> os.statvfs_result:
        assert reaper.reap() == 1    # unlinked and uncounted during the call
        return before

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "statvfs", statvfs_while_the_reaper_finishes)
        free = d.disk()[1]
    assert d.reaping == 0
    assert free >= before.f_bavail * before.f_frsize + MiB
