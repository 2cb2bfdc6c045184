"""master/sessions.py: which client sessions are alive (orphans of dead mounts are released), and
the namespace's record of who keeps each orphan."""
from __future__ import annotations

import pathlib

import pytest

from curvine_py.master.namespace import ROOT_INO
from curvine_py.master.sessions import Sessions
from tests.unit.test_fuse_names import Clock
from tests.unit.test_master_support import FakeClock, mkfile, open_store

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL


def test_sessions_are_judged_after_a_timeout_of_silence_and_not_right_after_start() -> None:
    clock = Clock()
    sessions = Sessions(30.0, clock=clock)
    sessions.seen("mount-a")
    assert not sessions.can_judge(), "a live mount may not have called a fresh master yet"
    clock.now += 29
    sessions.seen("mount-b")
    clock.now += 1
    assert sessions.can_judge()
    assert sessions.dead("mount-a"), "silent for the whole timeout"
    assert not sessions.dead("mount-b")
    assert sessions.dead("never-seen")
    sessions.seen("mount-a")                 # back (a partition healed): alive again
    assert not sessions.dead("mount-a")
    sessions.seen("")                        # no session: nothing recorded
    assert sessions.dead("")


def test_the_namespace_records_who_keeps_each_orphan(tmp_path: pathlib.Path) -> None:
    ns = open_store(tmp_path, FakeClock(), unlink_grace_ms=1000)
    a, b, _ = (mkfile(ns, name) for name in ("a", "b", "c"))
    ns.unlink(ROOT_INO, "a", keep_orphan=True, keeper="s1")
    ns.rename(ROOT_INO, "c", ROOT_INO, "b", keep_orphan=True, keeper="s2")   # b replaced while open
    ns.unlink(ROOT_INO, "b")
    assert sorted(ns.kept_orphans()) == [(a.ino, "s1"), (b.ino, "s2")]
    ns.release_orphan(a.ino)
    assert ns.kept_orphans() == [(b.ino, "s2")]
    assert ns.getattr(b.ino).nlink == 0
    assert ns.check() == []
    ns.close()
