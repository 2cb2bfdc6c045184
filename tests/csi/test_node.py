"""The Node service over the real unix socket with real FUSE mounts and bind mounts: stage,
publish (read-write and read-only), stats, expansion, unpublish, unstage; idempotency and every
bad-input status code (csi-sanity's node categories)."""
from __future__ import annotations

import errno
import os
import pathlib

import grpc
import pytest

from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from tests.csi.plugin import Mode, Plugin, block_capability, capability, code_of, mount_pids
from tests.harness import Cluster

GiB = 1 << 30
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def new_volume(plugin: Plugin, name: str, size: int = GiB) -> str:
    return str(plugin.controller.CreateVolume(csi.CreateVolumeRequest(
        name=name, volume_capabilities=[capability()],
        capacity_range=csi.CapacityRange(required_bytes=size))).volume.volume_id)


def stage(plugin: Plugin, volume_id: str, staging: pathlib.Path, mode: int = Mode.SINGLE_NODE_WRITER,
          flags: tuple[str, ...] = ()) -> None:
    plugin.node.NodeStageVolume(csi.NodeStageVolumeRequest(
        volume_id=volume_id, staging_target_path=str(staging), volume_capability=capability(mode, flags=flags)))


def publish(plugin: Plugin, volume_id: str, staging: pathlib.Path, target: pathlib.Path, *,
            readonly: bool = False, mode: int = Mode.SINGLE_NODE_WRITER) -> None:
    plugin.node.NodePublishVolume(csi.NodePublishVolumeRequest(
        volume_id=volume_id, staging_target_path=str(staging), target_path=str(target),
        volume_capability=capability(mode), readonly=readonly))


def unpublish(plugin: Plugin, volume_id: str, target: pathlib.Path) -> None:
    plugin.node.NodeUnpublishVolume(csi.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=str(target)))


def unstage(plugin: Plugin, volume_id: str, staging: pathlib.Path) -> None:
    plugin.node.NodeUnstageVolume(csi.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=str(staging)))


def test_node_info_and_capabilities(plugin: Plugin) -> None:
    info = plugin.node.NodeGetInfo(csi.NodeGetInfoRequest())
    assert info.node_id == "node-a"
    assert dict(info.accessible_topology.segments) == {"topology.csi.curvine.io/node": "node-a"}
    RPC = csi.NodeServiceCapability.RPC
    caps = plugin.node.NodeGetCapabilities(csi.NodeGetCapabilitiesRequest()).capabilities
    assert sorted(c.rpc.type for c in caps) == sorted([RPC.STAGE_UNSTAGE_VOLUME, RPC.GET_VOLUME_STATS,
                                                      RPC.VOLUME_CONDITION, RPC.EXPAND_VOLUME])


def test_full_lifecycle_shares_data_with_the_cluster(plugin: Plugin, cluster: Cluster,
                                                     paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-life")
    for _ in range(2):                                   # every call twice: idempotent
        stage(plugin, volume_id, staging)
    assert (plugin.state_dir / "volumes" / f"{volume_id}.json").exists()
    assert "mounted=" in (plugin.state_dir / "logs" / f"{volume_id}.log").read_text()
    assert is_mounted(str(staging)) and len(mount_pids(staging)) == 1
    for _ in range(2):
        publish(plugin, volume_id, staging, target)
    (target / "written-by-pod").write_bytes(b"hello from the pod")
    client = cluster.client()
    with client.fs.open("/volumes/pvc-life/written-by-pod") as fh:
        assert fh.read() == b"hello from the pod"
    with client.fs.open("/volumes/pvc-life/written-by-cluster", "wb") as fh:
        fh.write(b"hello from the cluster")
    assert (target / "written-by-cluster").read_bytes() == b"hello from the cluster"
    assert sorted(os.listdir(target)) == ["written-by-cluster", "written-by-pod"]   # rooted at the volume's dir
    for _ in range(2):
        unpublish(plugin, volume_id, target)
    assert not target.exists()
    for _ in range(2):
        unstage(plugin, volume_id, staging)
    assert not is_mounted(str(staging)) and mount_pids(staging) == []
    assert not any(name.startswith(volume_id) for d in ("volumes", "logs")
                   for name in os.listdir(plugin.state_dir / d))    # no state, no log left on the node
    assert client.fs.exists("/volumes/pvc-life/written-by-pod")     # unstaging loses nothing


def test_read_only_publish_and_read_only_modes(plugin: Plugin, tmp_path: pathlib.Path) -> None:
    volume_id = new_volume(plugin, "pvc-ro")
    staging = tmp_path / "staging"
    staging.mkdir()
    stage(plugin, volume_id, staging)
    (staging / "existing").write_bytes(b"x")
    target = tmp_path / "ro-target"
    publish(plugin, volume_id, staging, target, readonly=True)
    assert (target / "existing").read_bytes() == b"x"
    with pytest.raises(OSError) as err:
        (target / "new").write_bytes(b"y")
    assert err.value.errno == errno.EROFS
    rw = tmp_path / "rw-target"
    publish(plugin, volume_id, staging, rw)
    (rw / "new").write_bytes(b"y")
    # the same target again with the other access is a conflict
    with pytest.raises(grpc.RpcError) as conflict:
        publish(plugin, volume_id, staging, target, readonly=False)
    assert conflict.value.code() == grpc.StatusCode.ALREADY_EXISTS
    for t in (target, rw):
        unpublish(plugin, volume_id, t)
    unstage(plugin, volume_id, staging)
    # a reader-only access mode stages the FUSE mount read-only
    stage(plugin, volume_id, staging, Mode.MULTI_NODE_READER_ONLY)
    with pytest.raises(OSError) as ro:
        (staging / "nope").write_bytes(b"z")
    assert ro.value.errno == errno.EROFS
    unstage(plugin, volume_id, staging)


def test_stats_report_the_mount_and_expansion_answers(plugin: Plugin,
                                                      paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-stats")
    stage(plugin, volume_id, staging)
    publish(plugin, volume_id, staging, target)
    (target / "f").write_bytes(b"z" * 100_000)
    stats = plugin.node.NodeGetVolumeStats(csi.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target)))
    st = os.statvfs(target)
    usage = {u.unit: u for u in stats.usage}
    assert usage[csi.VolumeUsage.BYTES].total == st.f_blocks * st.f_frsize > 0
    assert usage[csi.VolumeUsage.INODES].total == st.f_files
    assert usage[csi.VolumeUsage.INODES].used == st.f_files - st.f_ffree
    assert not stats.volume_condition.abnormal
    expanded = plugin.node.NodeExpandVolume(csi.NodeExpandVolumeRequest(
        volume_id=volume_id, volume_path=str(target), capacity_range=csi.CapacityRange(required_bytes=GiB)))
    assert expanded.capacity_bytes == GiB
    unpublish(plugin, volume_id, target)
    unstage(plugin, volume_id, staging)


def test_stage_and_publish_bad_requests(plugin: Plugin, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-node-bad")
    cap = capability()
    Stage, Publish = csi.NodeStageVolumeRequest, csi.NodePublishVolumeRequest
    stage_call, publish_call = plugin.node.NodeStageVolume, plugin.node.NodePublishVolume
    assert code_of(stage_call, Stage(staging_target_path=str(staging), volume_capability=cap)) == INVALID
    assert code_of(stage_call, Stage(volume_id=volume_id, volume_capability=cap)) == INVALID
    assert code_of(stage_call, Stage(volume_id=volume_id, staging_target_path=str(staging))) == INVALID
    assert code_of(stage_call, Stage(volume_id=volume_id, staging_target_path=str(staging),
                                     volume_capability=block_capability())) == INVALID
    assert code_of(stage_call, Stage(volume_id=volume_id, staging_target_path=str(staging),
                                     volume_capability=capability(flags=["suid"]))) == INVALID
    assert code_of(stage_call, Stage(volume_id="cv-" + "0" * 32, staging_target_path=str(staging),
                                     volume_capability=cap)) == NOT_FOUND
    assert not is_mounted(str(staging))                     # nothing was started by any of them
    full = {"volume_id": volume_id, "staging_target_path": str(staging), "target_path": str(target),
            "volume_capability": cap}
    for missing in ("volume_id", "target_path", "staging_target_path", "volume_capability"):
        assert code_of(publish_call, Publish(**{k: v for k, v in full.items() if k != missing})) == INVALID, missing
    assert code_of(publish_call, Publish(**full)) == grpc.StatusCode.FAILED_PRECONDITION     # not staged
    assert not target.exists()
    assert code_of(plugin.node.NodeUnpublishVolume, csi.NodeUnpublishVolumeRequest(target_path=str(target))) == INVALID
    assert code_of(plugin.node.NodeUnpublishVolume, csi.NodeUnpublishVolumeRequest(volume_id=volume_id)) == INVALID
    assert code_of(plugin.node.NodeUnstageVolume, csi.NodeUnstageVolumeRequest(staging_target_path=str(staging))) == \
        INVALID
    assert code_of(plugin.node.NodeUnstageVolume, csi.NodeUnstageVolumeRequest(volume_id=volume_id)) == INVALID


def test_conflicting_stage_and_early_unstage(plugin: Plugin, tmp_path: pathlib.Path,
                                             paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-node-conflict")
    stage(plugin, volume_id, staging)
    elsewhere = tmp_path / "other-staging"
    elsewhere.mkdir()
    request = csi.NodeStageVolumeRequest(volume_id=volume_id, staging_target_path=str(elsewhere),
                                         volume_capability=capability())
    assert code_of(plugin.node.NodeStageVolume, request) == grpc.StatusCode.ALREADY_EXISTS
    assert code_of(plugin.node.NodeStageVolume, csi.NodeStageVolumeRequest(
        volume_id=volume_id, staging_target_path=str(staging),
        volume_capability=capability(Mode.MULTI_NODE_READER_ONLY))) == grpc.StatusCode.ALREADY_EXISTS
    publish(plugin, volume_id, staging, target)
    early = csi.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=str(staging))
    assert code_of(plugin.node.NodeUnstageVolume, early) == grpc.StatusCode.FAILED_PRECONDITION
    assert is_mounted(str(target)) and is_mounted(str(staging))        # the refused call changed nothing
    unpublish(plugin, volume_id, target)
    unstage(plugin, volume_id, staging)


def test_unpublish_and_unstage_of_unknown_volumes_succeed(plugin: Plugin,
                                                          paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    unpublish(plugin, "cv-" + "1" * 32, target)
    unstage(plugin, "cv-" + "1" * 32, staging)
    assert staging.is_dir() and not target.exists()


def test_stats_and_expand_bad_requests(plugin: Plugin, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-stats-bad")
    Stats, Expand = csi.NodeGetVolumeStatsRequest, csi.NodeExpandVolumeRequest
    stats, expand = plugin.node.NodeGetVolumeStats, plugin.node.NodeExpandVolume
    assert code_of(stats, Stats(volume_path=str(target))) == INVALID
    assert code_of(stats, Stats(volume_id=volume_id)) == INVALID
    assert code_of(stats, Stats(volume_id="cv-" + "2" * 32, volume_path=str(target))) == NOT_FOUND
    assert code_of(expand, Expand(volume_path=str(target))) == INVALID
    assert code_of(expand, Expand(volume_id=volume_id)) == INVALID
    assert code_of(expand, Expand(volume_id="cv-" + "2" * 32, volume_path=str(target))) == NOT_FOUND
    stage(plugin, volume_id, staging)
    publish(plugin, volume_id, staging, target)
    assert code_of(stats, Stats(volume_id=volume_id, volume_path="/path/does/not/exist")) == NOT_FOUND
    assert code_of(expand, Expand(volume_id=volume_id, volume_path=str(target),
                                  volume_capability=block_capability())) == INVALID
    unpublish(plugin, volume_id, target)
    unstage(plugin, volume_id, staging)


def test_the_capacity_is_a_quota_the_mount_enforces_and_expansion_raises(
        plugin: Plugin, cluster: Cluster, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    MiB = 1 << 20
    volume_id = new_volume(plugin, "pvc-quota", size=8 * MiB)
    assert cluster.client().fs.quota("/volumes/pvc-quota").max_bytes == 8 * MiB
    stage(plugin, volume_id, staging)
    publish(plugin, volume_id, staging, target)
    st = os.statvfs(target)
    assert st.f_blocks * st.f_frsize == 8 * MiB                     # df in the pod shows the volume's size
    (target / "first").write_bytes(os.urandom(6 * MiB))
    with pytest.raises(OSError) as err, open(target / "second", "wb") as fh:
        fh.write(os.urandom(4 * MiB))
    assert err.value.errno == errno.EDQUOT
    assert (target / "first").stat().st_size == 6 * MiB             # what fitted is intact
    stats = plugin.node.NodeGetVolumeStats(csi.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target)))
    usage = {u.unit: u for u in stats.usage}[csi.VolumeUsage.BYTES]
    assert usage.total == 8 * MiB and usage.used >= 6 * MiB
    plugin.controller.ControllerExpandVolume(csi.ControllerExpandVolumeRequest(
        volume_id=volume_id, capacity_range=csi.CapacityRange(required_bytes=32 * MiB)))
    (target / "second").write_bytes(os.urandom(4 * MiB))           # room again, without a remount
    st = os.statvfs(target)
    assert st.f_blocks * st.f_frsize == 32 * MiB
    unpublish(plugin, volume_id, target)
    unstage(plugin, volume_id, staging)


def test_max_inodes_is_an_inode_quota_the_pod_sees(plugin: Plugin, cluster: Cluster,
                                                   paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = str(plugin.controller.CreateVolume(csi.CreateVolumeRequest(
        name="pvc-inodes", volume_capabilities=[capability()], parameters={"maxInodes": "3"},
        capacity_range=csi.CapacityRange(required_bytes=GiB))).volume.volume_id)
    assert cluster.client().fs.quota("/volumes/pvc-inodes").max_inodes == 3
    stage(plugin, volume_id, staging)
    publish(plugin, volume_id, staging, target)
    for name in ("a", "b", "c"):
        (target / name).write_bytes(b"x")
    with pytest.raises(OSError) as err:
        (target / "d").write_bytes(b"x")
    assert err.value.errno == errno.EDQUOT
    stats = plugin.node.NodeGetVolumeStats(csi.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target)))
    inodes = {u.unit: u for u in stats.usage}[csi.VolumeUsage.INODES]
    assert (inodes.total, inodes.used, inodes.available) == (3, 3, 0)      # the quota, as the pod sees it
    # expansion keeps the inode limit
    plugin.controller.ControllerExpandVolume(csi.ControllerExpandVolumeRequest(
        volume_id=volume_id, capacity_range=csi.CapacityRange(required_bytes=2 * GiB)))
    assert cluster.client().fs.quota("/volumes/pvc-inodes").max_inodes == 3
    unpublish(plugin, volume_id, target)
    unstage(plugin, volume_id, staging)
