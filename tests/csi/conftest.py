"""Fixtures for the CSI tests: a real cluster and a real plugin on a unix socket (root, /dev/fuse)."""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.csi.plugin import Plugin, mount_pids
from tests.harness import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("cluster"), workers=1, capacity="4GB") as c:
        yield c


@pytest.fixture(scope="module")
def plugin(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    root = tmp_path_factory.mktemp("plugin")
    with Plugin(root, cluster.master_address) as p:
        yield p
    unmount_all(root)               # the plugin's private mount of its state dir's mounts/




@pytest.fixture(autouse=True)
def no_mounts_left(tmp_path: pathlib.Path) -> Iterator[None]:
    """A failed test must not leave mounts or mount processes behind for the next one."""
    yield
    for staging in mounts_under(tmp_path):
        for pid in mount_pids(pathlib.Path(staging)):
            os.kill(pid, signal.SIGKILL)
    unmount_all(tmp_path)


def unmount_all(root: pathlib.Path) -> None:
    for path in mounts_under(root):
        subprocess.run(["umount", "-l", path], check=False, capture_output=True)


def mounts_under(root: pathlib.Path) -> list[str]:
    """Mount points below `root`, deepest first (bind mounts before what they were bound from)."""
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh]
    return sorted((p for p in points if p.startswith(f"{root}/")), key=len, reverse=True)


@pytest.fixture
def paths(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A staging dir (made, as the CO does) and a target path (its parent made, as the CO does)."""
    staging = tmp_path / "staging"
    staging.mkdir()
    (tmp_path / "pods").mkdir()
    return staging, tmp_path / "pods" / "target"
