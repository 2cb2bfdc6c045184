"""The recovery watcher's retry pacing, with a fake clock and a mount starter that fails (as it
does while the master is down): one attempt per backoff step, not one per pass; success resets it."""
from __future__ import annotations

import pathlib
from typing import Any

from curvine_py.core.errors import Unavailable
from curvine_py.csi.layout import VolumeMounts
from curvine_py.csi.locks import KeyedLocks
from curvine_py.csi.nodestate import NodeState, StagedVolume
from curvine_py.csi.paths import PathPolicy
from curvine_py.csi.recovery import Recovery


class FailingMounts:
    """Stands in for MountProcesses: every mount is dead and restarting fails until `fixed`."""

    def __init__(self) -> None:
        self.starts = 0
        self.fixed = False

    def alive(self, pid: int, pid_start: int) -> bool:
        return self.fixed and pid == 42

    def stop(self, pid: int, pid_start: int, staging: str) -> None:
        pass

    def start(self, volume_id: str, volume_path: str, staging: str, **_: Any) -> tuple[int, int]:
        self.starts += 1
        if not self.fixed:
            raise Unavailable("the master does not answer")
        return 42, 1


class NoLayout:
    """Stands in for Layout: no real mounts (the pacing is what is tested)."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.dir = str(directory)

    def of(self, volume_id: str) -> VolumeMounts:
        return VolumeMounts(*[self.dir] * 5)

    def __getattr__(self, name: str) -> Any:
        return lambda *_, **__: self.dir


def test_failed_remounts_back_off_and_success_resets(tmp_path: pathlib.Path) -> None:
    state = NodeState(str(tmp_path), PathPolicy([str(tmp_path)]))
    staging = tmp_path / "staging"
    staging.mkdir()
    state.save(StagedVolume("cv-" + "0" * 32, "/volumes/v", str(staging), False, (), 7, 7))
    now = [100.0]
    mounts = FailingMounts()
    recovery = Recovery(state, mounts, KeyedLocks(), NoLayout(tmp_path), interval_s=1.0,  # type: ignore[arg-type]
                         clock=lambda: now[0])  # type: ignore[arg-type]

    def sweep_at(t: float) -> int:
        now[0] = 100.0 + t
        recovery.sweep()
        return mounts.starts

    assert sweep_at(0.0) == 1          # first failure: next try after 1 s
    assert sweep_at(0.5) == 1
    assert sweep_at(1.0) == 2          # second failure: 2 s
    assert sweep_at(2.5) == 2
    assert sweep_at(3.0) == 3          # third: 4 s
    assert sweep_at(6.9) == 3
    mounts.fixed = True
    assert sweep_at(7.0) == 4          # the remount works
    assert state.all()[0].pid == 42
    mounts.fixed = False               # (no real mount here, so the next pass finds it dead again)
    assert sweep_at(7.1) == 5          # the success reset the backoff: tried on the next pass
    assert sweep_at(7.5) == 5          # and the pacing starts again at 1 s
    assert sweep_at(8.1) == 6
