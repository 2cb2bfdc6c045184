"""Mount recovery: a watcher thread that finds staged volumes whose mount process died (kill -9,
OOM, a crash: the kernel then answers "Transport endpoint is not connected" on the staging path
and on every bind mount of it) and brings them back: start a new mount process on the volume's
private FUSE mount point and stack it on the staging path (curvine_py.csi.layout), from where
mount propagation carries it onto every target and into every pod whose volume mount is
HostToContainer (rslave); pods with private propagation are repaired inside their namespaces
(curvine_py.csi.nsbind). Targets are never unmounted during recovery: until the new mount is
stacked they answer ENOTCONN, so no write lands on the node's disk.

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
from curvine_py.csi import bindmounts, nsbind
from curvine_py.csi.errors import CsiError
from curvine_py.csi.layout import Layout
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
    if not is_mounted(staged.staging_path) or bindmounts.broken(staged.staging_path):
        return csi.VolumeCondition(abnormal=True, message=f"{staged.staging_path} is not mounted or broken")
    return csi.VolumeCondition(abnormal=False, message="mounted")


class Recovery:
    def __init__(self, state: NodeState, mounts: MountProcesses, locks: KeyedLocks, layout: Layout, *,
                 interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.mounts = mounts
        self.locks = locks
        self.layout = layout
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
        """Remounts `staged` if its mount died and repairs its targets; the caller holds its lock."""
        mounts = self.layout.of(staged.volume_id)
        healthy = (self.mounts.alive(staged.pid, staged.pid_start) and is_mounted(staged.staging_path)
                   and not bindmounts.broken(staged.staging_path))
        if healthy:
            self.layout.ensure_carriers(staged.volume_id, staged.staging_path)
            return self._repair_targets(staged)    # e.g. someone unmounted a target by hand
        log.warning("volume %s: the mount on %s died (pid %d): remounting", staged.volume_id, staged.staging_path,
                    staged.pid)
        self.mounts.stop(staged.pid, staged.pid_start, mounts.fuse)
        self.layout.prepare(staged.volume_id)
        pid, started = self.mounts.start(staged.volume_id, staged.volume_path, mounts.fuse,
                                         read_only=staged.read_only, options=staged.mount_options)
        healed = staged.with_process(pid, started)
        self.state.save(healed)            # the new process is ours even if what follows fails
        self.layout.attach(staged.volume_id, staged.staging_path)
        healed = healed.with_process(pid, started, bindmounts.device_of(mounts.fuse))
        self.state.save(healed)
        healed = self._repair_targets(healed)  # propagation did it for targets bound by this layout
        repaired, failed = nsbind.repair(staged.device, mounts.rw, mounts.ro)
        log.info("volume %s: remounted (pid %d), %d targets, %d private pod namespaces repaired%s",
                 staged.volume_id, pid, len(healed.targets), repaired,
                 f", {failed} could not be (their pods must restart)" if failed else "")
        return healed

    def _repair_targets(self, staged: StagedVolume) -> StagedVolume:
        for target in staged.targets:
            if not self.layout.target_needs_repair(target.path):
                continue
            if not os.path.isdir(target.path) and not is_mounted(target.path):
                log.warning("volume %s: target %s is gone, forgetting it", staged.volume_id, target.path)
                staged = staged.without_target(target.path)
                self.state.save(staged)
                continue
            self.layout.publish(staged.volume_id, target.path, read_only=target.read_only)   # stacked
        return staged
