"""The mount's --log-format json (observe/logs.py): every line it logs is one JSON object."""
from __future__ import annotations

import json
import pathlib

from tests.fuse.mounts import Mount
from tests.harness import Cluster


def test_a_mount_logs_json_lines(shared_cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with Mount(shared_cluster.master_address, tmp_path / "mnt", args=["--log-format", "json",
                                                                      "--log-level", "DEBUG"]) as mount:
        (mount.path / "f").write_bytes(b"x")
        assert (mount.path / "f").read_bytes() == b"x"
        lines = [line for line in mount.log.splitlines() if line.startswith("{")]
    assert lines, mount.log
    records = [json.loads(line) for line in lines]
    assert {r["role"] for r in records} == {"mount"}
    assert all({"ts", "level", "node", "logger", "msg"} <= r.keys() for r in records)
