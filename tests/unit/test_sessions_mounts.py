"""master/sessions.py: the mounts' descriptions kept for the report (latest per session, forgotten
with the session after a timeout of silence, bounded)."""
from __future__ import annotations

import pytest

from curvine_py.core.cluster import MountInfo
from curvine_py.core.errors import InvalidArgument
from curvine_py.master import sessions as sessions_module
from curvine_py.master.sessions import Sessions, check_mount
from tests.unit.test_fuse_names import Clock


def _listed(sessions: Sessions) -> list[tuple[str, str, int, float]]:
    return [(m.mount.node, m.mount.mountpoint, m.mount.metrics_port, m.age_s) for m in sessions.mounts()]


def test_the_latest_description_per_session_is_listed_until_the_session_is_silent_for_the_timeout() -> None:
    clock = Clock()
    sessions = Sessions(10.0, clock=clock)
    sessions.seen("s1", MountInfo("b", "/mnt/x", 9100))
    sessions.seen("s2", MountInfo("a", "/mnt/y"))
    sessions.seen("s3")                                        # a client without a description
    clock.now += 4
    sessions.seen("s1", MountInfo("b", "/mnt/x", 9200))     # the latest one wins
    assert _listed(sessions) == [("a", "/mnt/y", 0, 4.0), ("b", "/mnt/x", 9200, 0.0)]
    clock.now += 5
    sessions.seen("s2")                                        # any call keeps it alive, description kept
    clock.now += 5
    assert _listed(sessions) == [("a", "/mnt/y", 0, 5.0)], "s1 silent for 10 s: forgotten"
    assert sessions.dead("s1") and sessions.dead("s3") and not sessions.dead("s2")
    sessions.seen("s1")                                        # back without a description: not listed
    assert [m.mount.node for m in sessions.mounts()] == ["a"]


def test_a_dead_session_judged_for_its_orphans_is_no_longer_listed() -> None:
    clock = Clock()
    sessions = Sessions(10.0, clock=clock)
    sessions.seen("s1", MountInfo("n", "/m"))
    clock.now += 10
    assert sessions.dead("s1")
    sessions.seen("s1")
    assert sessions.mounts() == []


def test_at_most_max_mounts_are_kept_the_oldest_heard_of_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_module, "MAX_MOUNTS", 3)
    clock = Clock()
    sessions = Sessions(10.0, clock=clock)
    for i in range(3):
        sessions.seen(f"s{i}", MountInfo("n", f"/m{i}"))
        clock.now += 1
    sessions.seen("s0")                                        # s1 is now the oldest heard of
    sessions.seen("s3", MountInfo("n", "/m3"))
    assert [m.mount.mountpoint for m in sessions.mounts()] == ["/m0", "/m2", "/m3"]
    clock.now += 9                                             # s2 silent for 10 s, s0 and s3 for 9
    sessions.seen("s4", MountInfo("n", "/m4"))
    assert [m.mount.mountpoint for m in sessions.mounts()] == ["/m0", "/m3", "/m4"], "the silent go first"


@pytest.mark.parametrize(("mount", "what"), [
    (MountInfo("n", "/m", -1), "out of range"), (MountInfo("n", "/m", 65536), "out of range"),
    (MountInfo("", "/m"), "node name"), (MountInfo("n" * 256, "/m"), "node name"),
    (MountInfo("n", "m"), "absolute path"), (MountInfo("n", "/" + "m" * 4096), "absolute path")])
def test_a_description_no_mount_sends_is_refused(mount: MountInfo, what: str) -> None:
    with pytest.raises(InvalidArgument, match=what):
        check_mount(mount)
    assert check_mount(MountInfo("n" * 255, "/" + "m" * 4095, 65535)).metrics_port == 65535


def test_the_periodic_sweep_forgets_silent_sessions_without_a_report() -> None:
    clock = [0.0]
    sessions = Sessions(10.0, clock=lambda: clock[0])
    sessions.seen("quiet")
    sessions.seen("chatty")
    clock[0] = 8.0
    sessions.seen("chatty")
    clock[0] = 12.0
    sessions.forget_silent()
    assert sessions.dead("quiet")          # forgotten: judged dead, as before the sweep
    assert not sessions.dead("chatty")
