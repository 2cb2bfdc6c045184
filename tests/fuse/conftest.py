"""Fixtures for real FUSE mounts (root, /dev/fuse).

`shared_mount` is one cluster + one mount per test module (starting them costs ~3 s); `d` gives
each test its own fresh directory in it, so tests stay independent. The shared cluster ends with a
clean fsck (the namespace check and `curvine-py fsck`). Tests that kill or restart
processes build their own cluster and mount.
"""
from __future__ import annotations

import itertools
import pathlib
import tempfile
from collections.abc import Iterator

import pytest

from tests.fuse.middle import cluster_fsck, fsck
from tests.fuse.mounts import Mount
from tests.harness import Cluster

_dirs = itertools.count()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("cluster"), workers=1) as c:
        yield c
        # Every module's traffic through the mount ends with a clean fsck (issue 11): the
        # namespace's own check and the metadata against the worker's inventory.
        assert fsck(c) == []
        result = cluster_fsck(c)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def shared_mount(shared_cluster: Cluster) -> Iterator[Mount]:
    # Not under pytest's tmp dir: that one is 0700, and the permission tests run as other users.
    where = pathlib.Path(tempfile.mkdtemp(prefix="curvine-mnt-"))
    where.chmod(0o755)
    try:
        with Mount(shared_cluster.master_address, where) as m:
            yield m
    finally:
        where.rmdir()


@pytest.fixture
def d(shared_mount: Mount, request: pytest.FixtureRequest) -> pathlib.Path:
    """A fresh, world-writable directory in the shared mount, named after the test."""
    path = shared_mount.path / f"{request.node.name[:80]}-{next(_dirs)}"
    path.mkdir()
    path.chmod(0o777)
    return path


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """A cluster of its own, for tests that stop, kill or restart processes."""
    with Cluster(tmp_path / "cluster", workers=1) as c:
        yield c
