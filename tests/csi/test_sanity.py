"""The Kubernetes CSI conformance suite, csi-sanity v5.3.1, against `curvine-py csi` on its real
unix socket with real FUSE and bind mounts: it must pass every spec for the capabilities the
driver advertises (the rest it skips by itself: ControllerPublish, snapshots, clones, group
snapshots, ModifyVolume are not offered).

csi-sanity is a Go program: set CSI_SANITY to its binary or put it on PATH. It builds offline from
the csi-test v5.3.1 tag, whose dependencies are vendored, with Debian 12's Go 1.19
(`apt-get install golang-1.19-go`; `go build -mod=vendor ./cmd/csi-sanity`, see docs/kubernetes.md).
Without it this test is reported as skipped, never as passed.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from tests.csi.plugin import Plugin
from tests.harness import Cluster

GiB = 1 << 30


def sanity_binary() -> str | None:
    return os.environ.get("CSI_SANITY") or shutil.which("csi-sanity")


def test_csi_sanity_passes(tmp_path: pathlib.Path) -> None:
    binary = sanity_binary()
    if binary is None:
        pytest.skip("csi-sanity is not installed (set CSI_SANITY): see this module's docstring")
    with Cluster(tmp_path / "cluster", workers=1, capacity="8GB") as cluster, \
            Plugin(tmp_path / "plugin", cluster.master_address) as plugin:
        result = subprocess.run([
            binary, f"-csi.endpoint=unix://{plugin.socket}", f"-csi.mountdir={tmp_path}/mnt",
            f"-csi.stagingdir={tmp_path}/stage", f"-csi.testvolumesize={GiB}", f"-csi.testvolumeexpandsize={2 * GiB}",
            "-ginkgo.no-color"], capture_output=True, text=True, timeout=600, check=False)
    summary = re.search(r"(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped", result.stdout)
    assert summary is not None, result.stdout[-5000:] + result.stderr[-2000:]
    passed, failed = int(summary.group(1)), int(summary.group(2))
    assert (result.returncode, failed) == (0, 0), result.stdout[-20000:]
    assert passed >= 48, summary.group(0)     # every identity, controller and node spec that applies
