"""Mount recovery: a watcher thread that finds staged volumes whose mount process died (kill -9,
OOM, a crash: the kernel then answers "Transport endpoint is not connected" on the staging path
and on every bind mount of it) and brings them back: detach the dead bind mounts and the dead
mount, start a new mount process on the staging path, bind every published target again.

Applications keep their pods: a path opened after the recovery works again; a file descriptor
opened on the dead mount stays dead (the kernel cannot move it to a new FUSE connection).
At plugin start the same check adopts the mounts of the previous plugin that are still alive.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from curvine_py.core.errors import CurvineError
from curvine_py.csi import bindmounts
from curvine_py.csi.errors import CsiError
from curvine_py.csi.locks import KeyedLocks
from curvine_py.csi.mounts import MountProcesses
from curvine_py.csi.nodestate import NodeState, StagedVolume
from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.proto.csi.v1 import csi_pb2 as csi

log = logging.getLogger(__name__)

# A volume whose remount fails (the master down, say) is retried after 1, 2, 4 ... 30 s, not on
# every pass: each attempt starts a process and logs an error.
MAX_BACKOFF_S = 30.0


def mount_condition(staged: StagedVolume, mounts: MountProcesses) -> csi.VolumeCondition:
    if not mounts.alive(staged.pid, staged.pid_start):
        return csi.VolumeCondition(abnormal=True, message=f"the mount process (pid {staged.pid}) is gone: "
                                                          "the node plugin is remounting the volume")
    if not is_mounted(staged.staging_path):
        return csi.VolumeCondition(abnormal=True, message=f"{staged.staging_path} is not mounted")
    return csi.VolumeCondition(abnormal=False, message="mounted")


class Recovery:
    def __init__(self, state: NodeState, mounts: MountProcesses, locks: KeyedLocks, *, interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.mounts = mounts
        self.locks = locks
        self.interval_s = interval_s
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}      # volume id -> (failures in a row, next try)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        adopted = [v.volume_id for v in self.state.all() if self.mounts.alive(v.pid, v.pid_start)]
        if adopted:
            log.info("adopted the live mounts of %s", adopted)
        self.sweep()
        self._thread = threading.Thread(target=self._run, name="csi-recovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()

    def sweep(self) -> None:
        """One pass over every staged volume; a volume that cannot be healed now is retried next pass."""
        for staged in self.state.all():
            failures, next_try = self._failures.get(staged.volume_id, (0, 0.0))
            if self._clock() < next_try:
                continue
            with self.locks.hold(staged.volume_id):
                current = self.state.load(staged.volume_id)    # it may have been unstaged meanwhile
                if current is None:
                    self._failures.pop(staged.volume_id, None)
                    continue
                try:
                    self.heal(current)
                    self._failures.pop(staged.volume_id, None)
                except (CurvineError, CsiError, OSError) as exc:
                    delay = min(MAX_BACKOFF_S, 2.0 ** failures)
                    self._failures[staged.volume_id] = (failures + 1, self._clock() + delay)
                    log.error("volume %s: recovery failed, next try in %.0f s: %s", current.volume_id, delay, exc)

    def heal(self, staged: StagedVolume) -> StagedVolume:
        """Remounts `staged` if its mount died and re-binds its targets; the caller holds its lock."""
        healthy = self.mounts.alive(staged.pid, staged.pid_start) and is_mounted(staged.staging_path)
        if healthy:
            for target in [t for t in staged.targets if not is_mounted(t.path)]:
                if not os.path.isdir(target.path):      # the pod's dir is gone: nothing to put back
                    log.warning("volume %s: target %s is gone, forgetting it", staged.volume_id, target.path)
                    staged = staged.without_target(target.path)
                    self.state.save(staged)
                    continue
                # e.g. someone unmounted a target by hand: put it back
                bindmounts.bind(staged.staging_path, target.path, read_only=target.read_only)
            return staged
        log.warning("volume %s: the mount on %s died (pid %d): remounting", staged.volume_id, staged.staging_path,
                    staged.pid)
        for target in staged.targets:
            bindmounts.detach(target.path)
        self.mounts.stop(staged.pid, staged.pid_start, staged.staging_path)
        pid, started = self.mounts.start(staged.volume_id, staged.volume_path, staged.staging_path,
                                         read_only=staged.read_only, options=staged.mount_options)
        healed = staged.with_process(pid, started)
        self.state.save(healed)
        for target in healed.targets:
            if not os.path.isdir(target.path):
                healed = healed.without_target(target.path)
                self.state.save(healed)
                continue
            bindmounts.bind(healed.staging_path, target.path, read_only=target.read_only)
        log.info("volume %s: remounted (pid %d) and re-bound %d targets", staged.volume_id, pid, len(healed.targets))
        return healed
