"""`report` and `report --json` show each worker's disk reserve (issue 11, "Disk reserve"): the
--free-space-ratio it runs with and the bytes that keeps free on its data dir's file system,
measured there (statvfs), as the worker's heartbeat carries them."""
from __future__ import annotations

import json
import pathlib

import psutil

from curvine_py.cli.common import human_bytes
from curvine_py.proto.curvine.v1.master_pb2 import WorkerInfo
from tests.harness import Cluster, wait_until
from tests.integration.test_cli import cli


def test_report_shows_the_disk_reserve_of_each_worker(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=2, worker_args=["--free-space-ratio", "0.25"]) as cluster:
        total = psutil.disk_usage(str(cluster.worker_dir(0))).total
        client = cluster.client()

        def reported() -> list[WorkerInfo]:
            return list(client.master.report().workers)

        wait_until(lambda: all(w.reserve_bytes for w in reported()), 15, "a heartbeat with the reserve")
        for w in reported():
            assert w.free_space_ratio == 0.25
            assert w.reserve_bytes == int(total * 0.25)
            assert 0 < w.fs_free_bytes <= total

        out = cli("report", "--master", cluster.master_address)
        assert out.returncode == 0, out.stderr.decode()
        # one table row per worker, its "disk reserve" cell: ratio = bytes kept free (free now)
        assert out.stdout.decode().count(f"25% = {human_bytes(int(total * 0.25))} (free ") == 2

        as_json = cli("report", "--master", cluster.master_address, "--json")
        workers = json.loads(as_json.stdout)["workers"]
        assert [(w["freeSpaceRatio"], w["reserveBytes"]) for w in workers] == [(0.25, int(total * 0.25))] * 2
