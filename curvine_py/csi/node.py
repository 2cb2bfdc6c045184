"""The CSI Node service: NodeStageVolume runs the volume's FUSE mount on the staging path,
NodePublishVolume bind-mounts it into pods, and the recovery watcher keeps both alive.

Each handler validates the request first (INVALID_ARGUMENT before anything else), then takes the
volume's lock and compares with the node state: a repeat of a call that already happened
succeeds without doing it again, a conflicting one is ALREADY_EXISTS.
"""
from __future__ import annotations

import errno
import logging
import os
from typing import Any

from curvine_py.csi import bindmounts, volumes
from curvine_py.csi.catalog import Catalog
from curvine_py.csi.cgroups import cgroup_dirs
from curvine_py.csi.driver_settings import DriverSettings
from curvine_py.csi.layout import Layout
from curvine_py.csi.errors import already_exists, csi_method, invalid, not_found, precondition
from curvine_py.csi.locks import KeyedLocks
from curvine_py.csi.mounts import MountProcesses
from curvine_py.csi.nodestate import NodeState, StagedVolume, Target
from curvine_py.csi.paths import PathPolicy, check_volume_id, normal_absolute
from curvine_py.csi.recovery import Recovery, mount_condition
from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from curvine_py.proto.csi.v1 import csi_pb2_grpc

log = logging.getLogger(__name__)

RPC = csi.NodeServiceCapability.RPC
CAPABILITIES = (RPC.STAGE_UNSTAGE_VOLUME, RPC.GET_VOLUME_STATS, RPC.VOLUME_CONDITION, RPC.EXPAND_VOLUME)
TOPOLOGY_KEY = "topology.csi.curvine.io/node"
# mount_flags a CO may pass through to `curvine-py mount -o` (anything else is INVALID_ARGUMENT).
MOUNT_FLAGS = {"ro", "noatime", "nodiratime", "relatime", "writeback_cache", "direct_io", "keep_cache"}
VALUED_MOUNT_FLAGS = {"attr_timeout", "entry_timeout", "negative_timeout"}


def mount_options(capability: csi.VolumeCapability) -> tuple[str, ...]:
    flags: list[str] = []
    for flag in capability.mount.mount_flags:
        for option in filter(None, flag.split(",")):
            key, _, value = option.partition("=")
            if option in MOUNT_FLAGS or (key in VALUED_MOUNT_FLAGS and value.replace(".", "", 1).isdigit()):
                flags.append(option)
            else:
                raise invalid(f"mount flag {option!r} is not supported; supported: {sorted(MOUNT_FLAGS)} and "
                              f"{sorted(k + '=SECONDS' for k in VALUED_MOUNT_FLAGS)}")
    return tuple(flags)


class Node(csi_pb2_grpc.NodeServicer):
    def __init__(self, catalog: Catalog, settings: DriverSettings) -> None:
        self.catalog = catalog
        self.settings = settings
        self.paths = PathPolicy(settings.path_roots, reserved=[settings.state_dir])
        self.state = NodeState(settings.state_dir, self.paths, MOUNT_FLAGS, VALUED_MOUNT_FLAGS)
        self.mounts = MountProcesses(master=settings.master, token=settings.token, node_id=settings.node_id,
                                     log_dir=os.path.join(settings.state_dir, "logs"), extra_args=settings.mount_args,
                                     cgroups=cgroup_dirs(settings.cgroup_root, settings.mount_cgroup)
                                     if settings.mount_cgroup else ())
        self.locks = KeyedLocks()
        self.layout = Layout(settings.state_dir)
        self.recovery = Recovery(self.state, self.mounts, self.locks, self.layout,
                                 interval_s=settings.recovery_interval_s)

    def start(self) -> None:
        self.recovery.start()

    def stop(self) -> None:
        self.recovery.stop()

    def _path(self, value: str, name: str) -> str:
        return self.paths.check(value, name)

    # -- stage / unstage ---------------------------------------------------------------------
    @csi_method
    def NodeStageVolume(self, request: csi.NodeStageVolumeRequest, context: Any) -> csi.NodeStageVolumeResponse:
        volume_id = check_volume_id(request.volume_id)
        staging = self._path(request.staging_target_path, "staging_target_path")
        volumes.require_capability(request.volume_capability if request.HasField("volume_capability") else None)
        options = mount_options(request.volume_capability)
        read_only = request.volume_capability.access_mode.mode in volumes.READ_ONLY_MODES
        with self.locks.hold(volume_id):
            staged = self.state.load(volume_id)
            if staged is not None:
                if staged.staging_path != staging:
                    raise already_exists(f"volume {volume_id} is staged at {staged.staging_path}")
                if (staged.read_only, staged.mount_options) != (read_only, options):
                    raise already_exists(f"volume {volume_id} is staged with other options")
                self.recovery.heal(staged)
                return csi.NodeStageVolumeResponse()
            record = self.catalog.lookup(volume_id)
            if record is None:
                raise not_found(f"volume {volume_id} does not exist")
            _make_dir(staging)
            bindmounts.detach_all(staging)     # a dead mount left by an unknown earlier life of this node
            fuse = self.layout.prepare(volume_id)
            pid, started = self.mounts.start(volume_id, record.path, fuse, read_only=read_only, options=options)
            try:
                self.layout.attach(volume_id, staging)
                device = bindmounts.device_of(fuse)
            except BaseException:
                self.mounts.stop(pid, started, fuse)
                self.layout.detach_volume(volume_id, staging)
                raise
            self.state.save(StagedVolume(volume_id, record.path, staging, read_only, options, pid, started,
                                         device=device))
        return csi.NodeStageVolumeResponse()

    @csi_method
    def NodeUnstageVolume(self, request: csi.NodeUnstageVolumeRequest,
                          context: Any) -> csi.NodeUnstageVolumeResponse:
        volume_id = check_volume_id(request.volume_id)
        staging = self._path(request.staging_target_path, "staging_target_path")
        with self.locks.hold(volume_id):
            staged = self.state.load(volume_id)
            if staged is None or staged.staging_path != staging:
                if staged is None and _is_dead_fuse(staging):     # a leftover of a mount we lost track of
                    bindmounts.detach_all(staging)
                return csi.NodeUnstageVolumeResponse()
            if staged.targets:
                raise precondition(f"volume {volume_id} is still published at "
                                   f"{[t.path for t in staged.targets]}: unpublish first")
            self.mounts.stop(staged.pid, staged.pid_start, self.layout.of(volume_id).fuse)
            self.layout.detach_volume(volume_id, staging)
            self.state.remove(volume_id)
            self.mounts.remove_log(volume_id)       # a clean unstage leaves nothing on the node
        log.info("unstaged volume %s from %s", volume_id, staging)
        return csi.NodeUnstageVolumeResponse()

    # -- publish / unpublish -----------------------------------------------------------------
    @csi_method
    def NodePublishVolume(self, request: csi.NodePublishVolumeRequest,
                          context: Any) -> csi.NodePublishVolumeResponse:
        volume_id = check_volume_id(request.volume_id)
        target_path = self._path(request.target_path, "target_path")
        staging = self._path(request.staging_target_path, "staging_target_path")
        self.paths.check_apart(staging, target_path)
        volumes.require_capability(request.volume_capability if request.HasField("volume_capability") else None)
        read_only = request.readonly or request.volume_capability.access_mode.mode in volumes.READ_ONLY_MODES
        with self.locks.hold(volume_id):
            staged = self.state.load(volume_id)
            if staged is None or staged.staging_path != staging:
                raise precondition(f"volume {volume_id} is not staged at {staging}")
            existing = staged.target(target_path)
            if existing is not None:
                if existing.read_only != read_only:
                    raise already_exists(f"{target_path} is published {'read-only' if existing.read_only else 'rw'}")
                if is_mounted(target_path) and not bindmounts.broken(target_path):
                    return csi.NodePublishVolumeResponse()
            _make_dir(target_path)
            if existing is None:
                bindmounts.detach_all(target_path)     # not ours: a leftover of an unknown earlier life
            # ours but dead: the new bind is stacked on it, so the target is never a bare dir
            self.layout.publish(volume_id, target_path, read_only=read_only)
            self.state.save(staged.with_target(Target(target_path, read_only)))
        log.info("published volume %s at %s%s", volume_id, target_path, " (read-only)" if read_only else "")
        return csi.NodePublishVolumeResponse()

    @csi_method
    def NodeUnpublishVolume(self, request: csi.NodeUnpublishVolumeRequest,
                            context: Any) -> csi.NodeUnpublishVolumeResponse:
        volume_id = check_volume_id(request.volume_id)
        target_path = self._path(request.target_path, "target_path")
        with self.locks.hold(volume_id):
            staged = self.state.load(volume_id)
            bindmounts.detach_all(target_path)         # every layer a recovery stacked on it
            try:
                os.rmdir(target_path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                log.warning("left %s in place: not empty after unmounting", target_path)
            if staged is not None and staged.target(target_path) is not None:
                self.state.save(staged.without_target(target_path))
        return csi.NodeUnpublishVolumeResponse()

    # -- stats, expansion, info --------------------------------------------------------------
    def _staged_at(self, volume_id: str, path: str) -> StagedVolume:
        staged = self.state.load(volume_id)
        if staged is None:
            raise not_found(f"volume {volume_id} is not staged on this node")
        if path != staged.staging_path and staged.target(path) is None:
            raise not_found(f"volume {volume_id} is not mounted at {path}")
        return staged

    @csi_method
    def NodeGetVolumeStats(self, request: csi.NodeGetVolumeStatsRequest,
                           context: Any) -> csi.NodeGetVolumeStatsResponse:
        volume_id = check_volume_id(request.volume_id)
        path = normal_absolute(request.volume_path, "volume_path")   # only compared with the state
        staged = self._staged_at(volume_id, path)
        condition = mount_condition(staged, self.mounts)
        response = csi.NodeGetVolumeStatsResponse(volume_condition=condition)
        if condition.abnormal:
            return response
        try:
            st = os.statvfs(path)
        except OSError as exc:
            response.volume_condition.abnormal = True
            response.volume_condition.message = f"statfs {path}: {exc.strerror}"
            return response
        total, free, avail = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize
        response.usage.add(unit=csi.VolumeUsage.BYTES, total=total, available=avail, used=total - free)
        response.usage.add(unit=csi.VolumeUsage.INODES, total=st.f_files, available=st.f_favail,
                           used=st.f_files - st.f_ffree)
        return response

    @csi_method
    def NodeExpandVolume(self, request: csi.NodeExpandVolumeRequest, context: Any) -> csi.NodeExpandVolumeResponse:
        volume_id = check_volume_id(request.volume_id)
        path = normal_absolute(request.volume_path, "volume_path")   # only compared with the state
        if request.HasField("volume_capability"):
            volumes.require_capability(request.volume_capability)
        requested = volumes.capacity_of(request.capacity_range if request.HasField("capacity_range") else None)
        self._staged_at(volume_id, path)
        record = self.catalog.lookup(volume_id)
        if record is None:
            raise not_found(f"volume {volume_id} does not exist")
        # The quota is enforced by the master: a FUSE volume has nothing to grow on the node.
        return csi.NodeExpandVolumeResponse(capacity_bytes=max(requested, record.capacity))

    @csi_method
    def NodeGetCapabilities(self, request: csi.NodeGetCapabilitiesRequest,
                            context: Any) -> csi.NodeGetCapabilitiesResponse:
        return csi.NodeGetCapabilitiesResponse(capabilities=[
            csi.NodeServiceCapability(rpc=RPC(type=t)) for t in CAPABILITIES])

    @csi_method
    def NodeGetInfo(self, request: csi.NodeGetInfoRequest, context: Any) -> csi.NodeGetInfoResponse:
        return csi.NodeGetInfoResponse(node_id=self.settings.node_id, max_volumes_per_node=self.settings.max_volumes,
                                       accessible_topology=csi.Topology(segments={TOPOLOGY_KEY: self.settings.node_id}))


def _make_dir(path: str) -> None:
    try:
        os.makedirs(path)
    except FileExistsError:      # a dir, or a dead mount on one (which makedirs(exist_ok=True) refuses)
        pass


def _is_dead_fuse(path: str) -> bool:
    try:
        os.stat(path)
        return False
    except OSError as exc:
        return exc.errno == errno.ENOTCONN
