"""Mount recovery and adoption with real processes: kill -9 of a volume's mount process (the
"Transport endpoint is not connected" failure), kill -9 of the plugin, a plugin restart with the
mount alive and with the mount dead. Each test has its own plugin (they kill things)."""
from __future__ import annotations

import errno
import os
import pathlib
import signal
import subprocess
import time

import pytest

from curvine_py.csi.mounts import process_start_time
from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from tests.csi.plugin import Plugin, mount_pids
from tests.csi.test_node import new_volume, publish, stage, unpublish, unstage
from tests.harness import Cluster, wait_until

RECOVERY_DEADLINE_S = 10.0     # the bound from kill -9 to a working target


def works(target: pathlib.Path, old: str) -> bool:
    try:
        return (target / old).read_bytes() == b"before"
    except OSError as exc:
        if exc.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT):   # dead FUSE mount, or not re-bound yet
            return False
        raise


def kill_mount(staging: pathlib.Path) -> int:
    [pid] = mount_pids(staging)
    os.kill(pid, signal.SIGKILL)
    # gone means dead or a zombie: its cmdline empties earlier, while it is still exiting
    wait_until(lambda: process_start_time(pid) is None, 5, "the mount process gone")
    return pid


@pytest.fixture
def layout(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    staging, pods = tmp_path / "staging", tmp_path / "pods"
    staging.mkdir()
    pods.mkdir()
    return staging, pods / "a", pods / "b"


def test_a_killed_mount_is_remounted_and_its_targets_rebound(
        cluster: Cluster, tmp_path: pathlib.Path, layout: tuple[pathlib.Path, pathlib.Path, pathlib.Path]) -> None:
    staging, target, read_only = layout
    with Plugin(tmp_path / "plugin", cluster.master_address) as plugin:
        volume_id = new_volume(plugin, "pvc-recover")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        publish(plugin, volume_id, staging, read_only, readonly=True)
        (target / "old").write_bytes(b"before")
        dead = kill_mount(staging)
        wait_until(lambda: works(target, "old") and works(read_only, "old"), RECOVERY_DEADLINE_S,
                   "the published targets working again")
        [new] = mount_pids(staging)
        assert new != dead
        (target / "new").write_bytes(b"after")
        assert (read_only / "new").read_bytes() == b"after"
        with pytest.raises(OSError) as err:
            (read_only / "x").write_bytes(b"")
        assert err.value.errno == errno.EROFS       # the re-bound target is read-only again
        assert "remounted" in plugin.log
        unpublish(plugin, volume_id, target)
        unpublish(plugin, volume_id, read_only)
        unstage(plugin, volume_id, staging)
        assert mount_pids(staging) == [] and not is_mounted(str(staging))


def test_a_dead_mount_is_reported_abnormal_and_a_repeated_stage_heals_it(
        cluster: Cluster, tmp_path: pathlib.Path, layout: tuple[pathlib.Path, pathlib.Path, pathlib.Path]) -> None:
    staging, target, _ = layout
    # a watcher that never comes round in this test: the volume stays dead until asked
    with Plugin(tmp_path / "plugin", cluster.master_address, extra=["--recovery-interval", "3600"]) as plugin:
        volume_id = new_volume(plugin, "pvc-abnormal")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        (target / "old").write_bytes(b"before")
        kill_mount(staging)
        stats = plugin.node.NodeGetVolumeStats(csi.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=str(target)))
        assert stats.volume_condition.abnormal and "mount process" in stats.volume_condition.message
        assert not works(target, "old")
        stage(plugin, volume_id, staging)      # the CO repeats the call: the node heals the volume
        assert works(target, "old")
        stats = plugin.node.NodeGetVolumeStats(csi.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=str(target)))
        assert not stats.volume_condition.abnormal and stats.usage
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)


def test_mounts_outlive_a_killed_plugin_and_are_adopted_by_the_next(
        cluster: Cluster, tmp_path: pathlib.Path, layout: tuple[pathlib.Path, pathlib.Path, pathlib.Path]) -> None:
    staging, target, _ = layout
    plugin = Plugin(tmp_path / "plugin", cluster.master_address).start()
    try:
        volume_id = new_volume(plugin, "pvc-adopt")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        (target / "old").write_bytes(b"before")
        [pid] = mount_pids(staging)
        plugin.kill()
        (target / "while-plugin-down").write_bytes(b"still works")     # the pod does not notice
        assert works(target, "old") and plugin.socket.exists()          # the dead plugin's socket is left behind
        plugin.start()                                                 # removes the stale socket, adopts
        assert "adopted the live mounts" in plugin.log
        assert mount_pids(staging) == [pid]                            # not remounted, not killed
        stage(plugin, volume_id, staging)                              # idempotent against adopted state
        assert mount_pids(staging) == [pid]
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)
        assert mount_pids(staging) == [] and not is_mounted(str(staging)) and not target.exists()
    finally:
        plugin.stop()


def test_a_restarted_plugin_remounts_what_died_while_it_was_down(
        cluster: Cluster, tmp_path: pathlib.Path, layout: tuple[pathlib.Path, pathlib.Path, pathlib.Path]) -> None:
    staging, target, _ = layout
    plugin = Plugin(tmp_path / "plugin", cluster.master_address).start()
    try:
        volume_id = new_volume(plugin, "pvc-down")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        (target / "old").write_bytes(b"before")
        plugin.kill()
        kill_mount(staging)
        assert not works(target, "old")
        plugin.start()
        assert works(target, "old")        # the first sweep ran before the plugin said it serves
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)
        assert mount_pids(staging) == []
    finally:
        plugin.stop()


def test_a_stopped_plugin_leaves_mounts_running(cluster: Cluster, tmp_path: pathlib.Path,
                                                layout: tuple[pathlib.Path, pathlib.Path, pathlib.Path]) -> None:
    staging, target, _ = layout
    plugin = Plugin(tmp_path / "plugin", cluster.master_address).start()
    try:
        volume_id = new_volume(plugin, "pvc-sigterm")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        [pid] = mount_pids(staging)
        assert plugin.stop() == 0 and not plugin.socket.exists()      # SIGTERM: a clean exit, socket removed
        (target / "f").write_bytes(b"during an upgrade")
        plugin.start()
        assert mount_pids(staging) == [pid]
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)
    finally:
        plugin.stop()


def remove_directory_of_a_pod(target: pathlib.Path) -> None:
    """umount -l, then rmdir, as kubelet's cleanup of a deleted pod does. The recovery loop may bind
    the target again between the two (it is meant to): then unmount and try again."""
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
    while True:
        subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True)
        try:
            target.rmdir()
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise


def test_a_target_unmounted_by_hand_is_bound_again_and_a_vanished_one_forgotten(
        cluster: Cluster, tmp_path: pathlib.Path, layout: tuple[pathlib.Path, pathlib.Path, pathlib.Path]) -> None:
    staging, target, other = layout
    with Plugin(tmp_path / "plugin", cluster.master_address) as plugin:
        volume_id = new_volume(plugin, "pvc-rebind")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        publish(plugin, volume_id, staging, other)
        (target / "old").write_bytes(b"before")
        subprocess.run(["umount", "-l", str(target)], check=True)
        remove_directory_of_a_pod(other)
        wait_until(lambda: works(target, "old"), RECOVERY_DEADLINE_S, "the target bound again")
        wait_until(lambda: "forgetting it" in plugin.log, RECOVERY_DEADLINE_S, "the vanished target forgotten")
        assert not other.exists()
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)
