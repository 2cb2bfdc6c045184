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
import threading

from curvine_py.core.errors import CurvineError
from curvine_py.csi import bindmounts
from curvine_py.csi.errors import CsiError
from curvine_py.csi.locks import KeyedLocks
from curvine_py.csi.mounts import MountProcesses
from curvine_py.csi.nodestate import NodeState, StagedVolume
from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.proto.csi.v1 import csi_pb2 as csi

log = logging.getLogger(__name__)


def mount_condition(staged: StagedVolume, mounts: MountProcesses) -> csi.VolumeCondition:
    if not mounts.alive(staged.pid, staged.pid_start):
        return csi.VolumeCondition(abnormal=True, message=f"the mount process (pid {staged.pid}) is gone: "
                                                          "the node plugin is remounting the volume")
    if not is_mounted(staged.staging_path):
        return csi.VolumeCondition(abnormal=True, message=f"{staged.staging_path} is not mounted")
    return csi.VolumeCondition(abnormal=False, message="mounted")


class Recovery:
    def __init__(self, state: NodeState, mounts: MountProcesses, locks: KeyedLocks, *, interval_s: float) -> None:
        self.state = state
        self.mounts = mounts
        self.locks = locks
        self.interval_s = interval_s
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
            with self.locks.hold(staged.volume_id):
                current = self.state.load(staged.volume_id)    # it may have been unstaged meanwhile
                if current is None:
                    continue
                try:
                    self.heal(current)
                except (CurvineError, CsiError, OSError) as exc:
                    log.error("volume %s: recovery failed, retrying: %s", current.volume_id, exc)

    def heal(self, staged: StagedVolume) -> StagedVolume:
        """Remounts `staged` if its mount died and re-binds its targets; the caller holds its lock."""
        healthy = self.mounts.alive(staged.pid, staged.pid_start) and is_mounted(staged.staging_path)
        if healthy:
            missing = [t for t in staged.targets if not is_mounted(t.path)]
            for target in missing:        # e.g. someone unmounted a target by hand: put it back
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
            bindmounts.bind(healed.staging_path, target.path, read_only=target.read_only)
        log.info("volume %s: remounted (pid %d) and re-bound %d targets", staged.volume_id, pid, len(healed.targets))
        return healed
