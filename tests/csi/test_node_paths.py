"""Issue 29 item 2, over the real unix socket: the node service never uses a volume id as a path,
keeps staging and target paths below its path root and out of its state dir, and ignores a
crafted state file. Before the fix, `../../evil` with a planted state file mounted the whole
namespace, bind-mounted it elsewhere and wrote outside the state dir."""
from __future__ import annotations

import json
import os
import pathlib

import grpc
import pytest

from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from tests.csi.plugin import Plugin, capability, code_of, mount_pids
from tests.csi.test_node import new_volume, publish, stage, unpublish, unstage
from tests.harness import Cluster

INVALID = grpc.StatusCode.INVALID_ARGUMENT
HOSTILE_IDS = ["../../evil", "../evil", "a/b", "/etc/passwd", "..", ".", ".hidden", "cv-x\0y", "x" * 129,
               "evil\n", "cv-" + "a" * 32 + "/../../x"]


def message_of(call: object, request: object) -> tuple[grpc.StatusCode, str]:
    try:
        call(request)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    raise AssertionError("succeeded")


def test_hostile_volume_ids_are_invalid_in_every_node_call(plugin: Plugin,
                                                           paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    before = sorted(os.listdir(plugin.state_dir))
    cap = capability()
    for bad in HOSTILE_IDS:
        calls = [
            (plugin.node.NodeStageVolume, csi.NodeStageVolumeRequest(
                volume_id=bad, staging_target_path=str(staging), volume_capability=cap)),
            (plugin.node.NodeUnstageVolume, csi.NodeUnstageVolumeRequest(
                volume_id=bad, staging_target_path=str(staging))),
            (plugin.node.NodePublishVolume, csi.NodePublishVolumeRequest(
                volume_id=bad, staging_target_path=str(staging), target_path=str(target), volume_capability=cap)),
            (plugin.node.NodeUnpublishVolume, csi.NodeUnpublishVolumeRequest(volume_id=bad, target_path=str(target))),
            (plugin.node.NodeGetVolumeStats, csi.NodeGetVolumeStatsRequest(volume_id=bad, volume_path=str(target))),
            (plugin.node.NodeExpandVolume, csi.NodeExpandVolumeRequest(volume_id=bad, volume_path=str(target))),
        ]
        for call, request in calls:
            code, details = message_of(call, request)
            assert code == INVALID, (bad, request.__class__.__name__, details)
            assert "volume_id" in details
    assert sorted(os.listdir(plugin.state_dir)) == before and not is_mounted(str(staging))


def test_a_crafted_state_file_reached_by_traversal_is_never_used(
        plugin: Plugin, cluster: Cluster, tmp_path: pathlib.Path, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    """The attack of issue 29: a state file outside the state dir, named through `../`."""
    staging, target = paths
    client = cluster.client()
    with client.fs.open("/secret-outside-every-volume", "wb") as fh:
        fh.write(b"not yours")
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps({"volume_id": "../../evil", "volume_path": "/", "staging_path": str(staging),
                                "read_only": False, "mount_options": [], "pid": 1, "pid_start": 1,
                                "targets": [{"path": str(target), "read_only": False}]}))
    relative = os.path.relpath(str(evil)[:-5], plugin.state_dir / "volumes")
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    for bad in (relative, "../../evil"):
        assert code_of(plugin.node.NodePublishVolume, csi.NodePublishVolumeRequest(
            volume_id=bad, staging_target_path=str(staging), target_path=str(target),
            volume_capability=capability())) == INVALID
        assert code_of(plugin.node.NodeUnpublishVolume, csi.NodeUnpublishVolumeRequest(
            volume_id=bad, target_path=str(victim))) == INVALID
        assert code_of(plugin.node.NodeUnstageVolume, csi.NodeUnstageVolumeRequest(
            volume_id=bad, staging_target_path=str(staging))) == INVALID
    assert evil.exists() and victim.read_text() == "keep me" and not is_mounted(str(staging))
    assert not target.exists() and mount_pids(staging) == []


def test_a_planted_state_file_for_a_real_id_is_ignored(
        plugin: Plugin, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    """A state file in the state dir naming the namespace root (or anything unchecked) is reported, not acted on."""
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-planted")
    planted = plugin.state_dir / "volumes" / f"{volume_id}.json"
    bad_states = [
        {"volume_path": "/"},                                           # the whole namespace
        {"volume_path": "/volumes/../etc"},
        {"staging_path": "/etc"},
        {"targets": [{"path": "/root/elsewhere", "read_only": False}]},
        {"mount_options": ["allow_other,suid"]},
        {"volume_id": "cv-" + "0" * 32},
        {"pid": "1; rm -rf /"},
    ]
    base = {"volume_id": volume_id, "volume_path": "/volumes/pvc-planted", "staging_path": str(staging),
            "read_only": False, "mount_options": [], "pid": 0, "pid_start": 0, "targets": []}
    for override in bad_states:
        planted.write_text(json.dumps({**base, **override}))
        # the planted file is ignored: the volume is not staged here, so publish is refused
        code = code_of(plugin.node.NodePublishVolume, csi.NodePublishVolumeRequest(
            volume_id=volume_id, staging_target_path=str(staging), target_path=str(target),
            volume_capability=capability()))
        assert code == grpc.StatusCode.FAILED_PRECONDITION, override
        assert not target.exists()
    planted.unlink()
    assert "ignoring the state file" in plugin.log


@pytest.mark.parametrize("field", ["staging", "target"])
def test_paths_outside_the_root_or_into_the_state_dir_are_invalid(
        plugin: Plugin, field: str, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    staging, target = paths
    volume_id = new_volume(plugin, "pvc-paths")
    cap = capability()
    bad_paths = ["relative/dir", "/", "/etc", "/tmp/../etc/x", f"{staging}/../../x/..", str(plugin.state_dir),
                 str(plugin.state_dir / "volumes" / "x"), str(plugin.state_dir.parent)]
    link = staging.parent / "link-out"
    link.symlink_to("/etc")
    bad_paths.append(str(link / "x"))
    for bad in bad_paths:
        if field == "staging":
            request = csi.NodeStageVolumeRequest(volume_id=volume_id, staging_target_path=bad, volume_capability=cap)
            code, details = message_of(plugin.node.NodeStageVolume, request)
        else:
            stage(plugin, volume_id, staging)
            request = csi.NodePublishVolumeRequest(volume_id=volume_id, staging_target_path=str(staging),
                                                   target_path=bad, volume_capability=cap)
            code, details = message_of(plugin.node.NodePublishVolume, request)
        assert code == INVALID, (bad, details)
    if field == "target":          # the volume into itself
        for inside in (staging, staging / "sub"):
            assert code_of(plugin.node.NodePublishVolume, csi.NodePublishVolumeRequest(
                volume_id=volume_id, staging_target_path=str(staging), target_path=str(inside),
                volume_capability=cap)) == INVALID
        publish(plugin, volume_id, staging, target)        # a good path still works
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)
    assert not os.path.exists("/etc/x") and mount_pids(staging) == []


def test_foreign_but_plain_ids_are_not_found_or_nothing_to_do(
        plugin: Plugin, paths: tuple[pathlib.Path, pathlib.Path]) -> None:
    """csi-sanity's made-up ids (fake-vol-id-...) are plain names: NOT_FOUND, never INVALID_ARGUMENT."""
    staging, target = paths
    assert code_of(plugin.node.NodeStageVolume, csi.NodeStageVolumeRequest(
        volume_id="fake-vol-id-1234", staging_target_path=str(staging),
        volume_capability=capability())) == grpc.StatusCode.NOT_FOUND
    plugin.node.NodeUnpublishVolume(csi.NodeUnpublishVolumeRequest(volume_id="fake-vol-id-1234",
                                                                   target_path=str(target)))
    plugin.node.NodeUnstageVolume(csi.NodeUnstageVolumeRequest(volume_id="fake-vol-id-1234",
                                                               staging_target_path=str(staging)))
    assert not any(n.startswith("fake") for d in ("volumes", "logs") for n in os.listdir(plugin.state_dir / d))
