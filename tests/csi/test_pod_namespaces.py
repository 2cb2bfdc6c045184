"""Issue 23, with real mounts and real mount namespaces: a simulated pod (`unshare -m`, its volume
bound into it as a container runtime does, with HostToContainer = rslave and with the Kubernetes
default = private propagation) keeps writing to its volume across kill -9 of the volume's mount
process and across plugin restarts; every write acknowledged to it is in the volume, none lands
on the node's disk, and the target is empty when unpublished."""
from __future__ import annotations

import json
import os
import pathlib
import posixpath
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from tests.csi.plugin import Plugin
from tests.csi.test_node import new_volume, publish, stage, unpublish, unstage
from tests.csi.test_recovery import RECOVERY_DEADLINE_S, kill_mount
from tests.harness import Cluster

# The pod: create a file every 20 ms until the stop file appears; print what the kernel said.
POD = r"""
import errno, json, os, sys, time
volume, stop = sys.argv[1], sys.argv[2]
n = 0
while not os.path.exists(stop):
    name = f"w-{n:06d}"
    try:
        with open(os.path.join(volume, name), "wb") as fh:
            fh.write(name.encode())
        result = {"ok": name}
    except OSError as exc:
        result = {"err": errno.errorcode.get(exc.errno, str(exc.errno))}
    print(json.dumps(result), flush=True)
    n += 1
    time.sleep(0.02)
"""


@dataclass
class Pod:
    process: subprocess.Popen[str]
    lines: list[dict[str, str]] = field(default_factory=list)

    def acknowledged(self) -> list[str]:
        return [r["ok"] for r in self.lines if "ok" in r]


@contextmanager
def pod(target: pathlib.Path, container_dir: pathlib.Path, propagation: str,
        stop: pathlib.Path) -> Iterator[Pod]:
    """A process in its own mount namespace with `target` bound at `container_dir` (rbind + make-r<propagation>,
    as runc does for a volume mount), writing into it."""
    container_dir.mkdir()
    script = (f"mount --rbind {target} {container_dir} && mount --make-r{propagation} {container_dir} && "
              f"exec {sys.executable} -c '{POD}' {container_dir} {stop}")
    process = subprocess.Popen(["unshare", "-m", f"--propagation={propagation}", "sh", "-c", script],
                               stdout=subprocess.PIPE, text=True)
    handle = Pod(process)
    try:
        yield handle
    finally:
        stop.touch()
        try:
            out, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        handle.lines.extend(json.loads(line) for line in out.splitlines() if line.startswith("{"))


def run_pod_through(cluster: Cluster, plugin: Plugin, tmp_path: pathlib.Path, propagation: str,
                    disturb: list[str]) -> Pod:
    staging, pods = tmp_path / "staging", tmp_path / "pods"
    staging.mkdir()
    pods.mkdir()
    target = pods / "target"
    name = f"pvc-ns-{propagation}-{'-'.join(disturb)}"
    volume_id = new_volume(plugin, name)
    stage(plugin, volume_id, staging)
    publish(plugin, volume_id, staging, target)
    stop = tmp_path / "stop"
    with pod(target, tmp_path / "container", propagation, stop) as handle:
        time.sleep(1.0)                               # writes before anything happens
        for what in disturb:
            if what == "kill-mount":
                kill_mount(staging)
                time.sleep(RECOVERY_DEADLINE_S)       # the window and well past it
            elif what == "restart-plugin":
                plugin.restart()
                time.sleep(1.0)
            elif what == "kill-plugin":
                plugin.kill()
                time.sleep(0.5)
                plugin.start()
                time.sleep(1.0)
        time.sleep(1.0)
    lines = handle.lines
    assert lines, "the pod wrote nothing"
    acknowledged = handle.acknowledged()
    client = cluster.client()
    in_volume = {posixpath.basename(e.path) for e in client.fs.ls(f"/volumes/{name}")}
    lost = [n for n in acknowledged if n not in in_volume]
    assert not lost, f"{len(lost)} of {len(acknowledged)} acknowledged writes are not in the volume: {lost[:5]}"
    # the last writes of the pod succeed: the volume serves the pod again
    assert all("ok" in r for r in lines[-10:]), lines[-10:]
    unpublish(plugin, volume_id, target)
    assert not target.exists(), "the target was not empty under its mounts: writes landed on the node's disk"
    assert os.listdir(tmp_path / "container") == []     # nor in the pod's dir on the node
    unstage(plugin, volume_id, staging)
    return handle


@pytest.mark.parametrize("propagation", ["slave", "private"])
def test_a_pod_keeps_writing_across_a_killed_mount(cluster: Cluster, tmp_path: pathlib.Path,
                                                    propagation: str) -> None:
    with Plugin(tmp_path / "plugin", cluster.master_address) as plugin:
        handle = run_pod_through(cluster, plugin, tmp_path, propagation, ["kill-mount"])
        errors = [r["err"] for r in handle.lines if "err" in r]
        assert set(errors) <= {"ENOTCONN", "ECONNABORTED"}, set(errors)    # the window fails, loudly
        assert "remounted" in plugin.log
        if propagation == "private":
            assert "private pod namespaces repaired" in plugin.log and " 0 private" not in plugin.log


@pytest.mark.parametrize("propagation", ["slave", "private"])
def test_a_pod_does_not_notice_plugin_restarts(cluster: Cluster, tmp_path: pathlib.Path, propagation: str) -> None:
    plugin = Plugin(tmp_path / "plugin", cluster.master_address).start()
    try:
        handle = run_pod_through(cluster, plugin, tmp_path, propagation, ["restart-plugin", "kill-plugin"])
        assert all("ok" in r for r in handle.lines), [r for r in handle.lines if "err" in r][:5]
        assert "adopted the live mounts" in plugin.log
    finally:
        plugin.stop()


def test_a_pod_survives_two_mount_kills_and_a_plugin_restart_between(cluster: Cluster,
                                                                      tmp_path: pathlib.Path) -> None:
    """Layers stack: the second recovery stacks on the first one, in the pod too."""
    plugin = Plugin(tmp_path / "plugin", cluster.master_address).start()
    try:
        run_pod_through(cluster, plugin, tmp_path, "slave", ["kill-mount", "restart-plugin", "kill-mount"])
    finally:
        plugin.stop()

