"""Issue 23: a restart of the node plugin's container must not end the volumes' FUSE processes.
A container runtime stops a container by killing every process in its cgroup; here the plugin
runs in a cgroup of its own ("the container") and is stopped the same way. With --mount-cgroup
the mounts were moved out and keep serving, and the next plugin adopts them; without it they
die with the "container" (what the issue saw)."""
from __future__ import annotations

import os
import pathlib
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.csi.plugin import Plugin, mount_pids
from tests.csi.test_node import new_volume, publish, stage, unpublish, unstage
from tests.csi.test_recovery import RECOVERY_DEADLINE_S, works
from tests.harness import Cluster, wait_until

HIERARCHY = pathlib.Path("/sys/fs/cgroup/pids")      # one v1 hierarchy, writable as root here


def kill_cgroup(group: pathlib.Path) -> None:
    """As runc does when it stops a container: SIGKILL every process of the cgroup."""
    deadline = time.monotonic() + 10
    while pids := [int(p) for p in (group / "cgroup.procs").read_text().split()]:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, "the cgroup does not empty"
        time.sleep(0.05)


@pytest.fixture
def container() -> Iterator[pathlib.Path]:
    if not (HIERARCHY / "cgroup.procs").exists():
        pytest.skip(f"no writable cgroup hierarchy at {HIERARCHY}")
    group = HIERARCHY / f"curvine-test-plugin-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    yield group
    kill_cgroup(group)
    group.rmdir()


@pytest.mark.parametrize("moved", [True, False])
def test_mounts_outlive_the_plugin_container(cluster: Cluster, tmp_path: pathlib.Path, container: pathlib.Path,
                                             moved: bool) -> None:
    name = f"curvine-test-mounts-{uuid.uuid4().hex[:8]}"
    enter = ["sh", "-c", f'echo $$ > {container}/cgroup.procs && exec "$@"', "sh"]
    flags = ["--mount-cgroup", name, "--cgroup-root", str(HIERARCHY)] if moved else []
    staging, target = tmp_path / "staging", tmp_path / "pods" / "a"
    staging.mkdir()
    target.parent.mkdir()
    plugin = Plugin(tmp_path / "plugin", cluster.master_address, prefix=enter, extra=flags).start()
    try:
        volume_id = new_volume(plugin, f"pvc-cgroup-{moved}")
        stage(plugin, volume_id, staging)
        publish(plugin, volume_id, staging, target)
        (target / "old").write_bytes(b"before")
        [pid] = mount_pids(staging)
        kill_cgroup(container)                     # the plugin container is restarted
        plugin.kill()                              # (reaps it)
        if not moved:
            assert not works(target, "old")        # the mount died with the container
            plugin.start()                         # and the next plugin remounts it
            wait_until(lambda: works(target, "old"), RECOVERY_DEADLINE_S, "the volume remounted")
        else:
            assert works(target, "old") and mount_pids(staging) == [pid]
            (target / "while-down").write_bytes(b"still serving")
            assert str(pid) in (HIERARCHY / name / "cgroup.procs").read_text().split()
            plugin.start()
            assert "adopted the live mounts" in plugin.log and mount_pids(staging) == [pid]
        unpublish(plugin, volume_id, target)
        unstage(plugin, volume_id, staging)
        assert mount_pids(staging) == []
    finally:
        plugin.stop()
        if (HIERARCHY / name).exists():
            kill_cgroup(HIERARCHY / name)
            (HIERARCHY / name).rmdir()
