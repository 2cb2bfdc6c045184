"""Mounts in the report (issue 13): each mount describes itself (node, mountpoint, /metrics port)
with every session heartbeat (RenewDirLeases); `report --json` and the table list the mounts
heard from within the session timeout. Real master, worker and two real FUSE mounts."""
from __future__ import annotations

import pathlib
import urllib.request

import pytest

from curvine_py.client.master import MasterClient
from curvine_py.core.cluster import MountInfo
from curvine_py.core.errors import InvalidArgument
from tests.fuse.mounts import Mount
from tests.harness import Cluster, wait_until
from tests.integration.test_cli import cli
from tests.integration.test_cli_report import report_json


def _mounts(cluster: Cluster) -> dict[str, dict]:   # type: ignore[type-arg]
    return {m["mountpoint"]: m for m in report_json(cluster).get("mounts", [])}


def test_mounts_are_listed_with_their_metrics_port_until_their_session_times_out(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "c", workers=1) as cluster:
        cluster.wait_for_live_workers(1)
        scraped = Mount(cluster.master_address, tmp_path / "scraped",
                        args=["--node", "node-a", "--metrics-port", "-1"]).start()
        quiet = Mount(cluster.master_address, tmp_path / "quiet", args=["--node", "node-b"]).start()
        try:
            assert scraped.process is not None
            port = int(scraped.process.field("metrics").rsplit(":", 1)[1])
            a, b = str(scraped.path), str(quiet.path)
            wait_until(lambda: sorted(_mounts(cluster)) == sorted([a, b]), 15, "both mounts heartbeat")
            mounts = _mounts(cluster)
            assert {k: (m["node"], int(m["metricsPort"])) for k, m in mounts.items()} == {
                a: ("node-a", port), b: ("node-b", 0)}
            assert all(int(m["lastHeartbeatMs"]) > 0 for m in mounts.values())
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                assert answer.status == 200 and b"curvine_" in answer.read()

            text = cli("report", "--master", cluster.master_address).stdout.decode()
            assert "mounts 2" in text
            cells = [[c.strip() for c in line.strip("│ ").split("│")] for line in text.splitlines()
                     if line.startswith("│ node-")]
            assert sorted(row[:3] for row in cells) == [["node-a", a, str(port)], ["node-b", b, "off"]]

            quiet.stop()
            # the session timeout (FAST_TIMERS: 3 s) passes: the stopped mount is forgotten
            wait_until(lambda: sorted(_mounts(cluster)) == [a], 20, "the stopped mount is no longer listed")
            assert int(_mounts(cluster)[a]["metricsPort"]) == port
        finally:
            quiet.stop(check=False)
            scraped.stop()
        wait_until(lambda: _mounts(cluster) == {}, 20, "no mount left")


def test_a_session_without_mount_info_is_not_listed_and_bad_info_is_refused(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "c", workers=0) as cluster:
        client = MasterClient(cluster.master_address)
        try:
            _refused_and_listed(cluster, client)
        finally:
            client.close()


def _refused_and_listed(cluster: Cluster, client: MasterClient) -> None:
    client.renew_dir_leases([])                    # an older mount, or any client: a session only
    assert report_json(cluster)["mounts"] == []
    for bad, what in ((MountInfo(node="n", mountpoint="relative"), "absolute path"),
                      (MountInfo(node="", mountpoint="/m"), "node name"),
                      (MountInfo(node="n" * 256, mountpoint="/m"), "node name"),
                      (MountInfo(node="n", mountpoint="/" + "m" * 4096), "absolute path"),
                      (MountInfo(node="n", mountpoint="/m", metrics_port=65536), "out of range")):
        with pytest.raises(InvalidArgument, match=what):
            client.renew_dir_leases([], bad)
    assert report_json(cluster)["mounts"] == [], "a refused description is not kept"
    client.renew_dir_leases([], MountInfo(node="n", mountpoint="/m", metrics_port=9100))
    [listed] = report_json(cluster)["mounts"]
    assert (listed["node"], listed["mountpoint"], int(listed["metricsPort"])) == ("n", "/m", 9100)
