"""What an operator meets first through the real CLI (issue 27): the README's "Use it" block runs
as written on a new cluster, a missing name is named by its path, `report --json` writes integers
as numbers, and the report table keeps health and node readable on a 100-column terminal."""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

from tests.harness import Cluster
from tests.integration.test_cli import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
CURVINE = str(pathlib.Path(sys.executable).with_name("curvine-py"))


def readme_use_it() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use it", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_use_it_block_runs_as_written(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    lines = readme_use_it()
    assert any("fs policy /l2cache" in line for line in lines)
    (tmp_path / "weights.bin").write_bytes(os.urandom(1 << 20))
    (tmp_path / "kv.bin").write_bytes(os.urandom(4096))
    env = {**os.environ, "CURVINE_MASTER": cluster1.master_address}
    for line in lines:
        if line.startswith("export "):
            continue
        command = line.replace(".venv/bin/curvine-py", CURVINE)
        result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60, check=False)
        expected = 1 if "exits 1" in line else 0
        assert result.returncode == expected, (line, result.stdout, result.stderr)
    assert (tmp_path / "copy.bin").read_bytes() == (tmp_path / "kv.bin").read_bytes()
    policy = cli("fs", "--master", cluster1.master_address, "policy", "/l2cache").stdout.decode()
    assert "class=cache" in policy and "ttl_ms=86400000" in policy


def test_a_missing_name_is_named_by_its_path(cluster1: Cluster) -> None:
    master = ["--master", cluster1.master_address]
    assert cli("fs", *master, "mkdir", "-p", "/runs/6").returncode == 0
    result = cli("fs", *master, "rm", "/runs/6/pipe.bin")
    err = result.stderr.decode()
    assert result.returncode == 1
    assert "rm: /runs/6/pipe.bin: no such file or directory (ENOENT)" in err, err
    assert not re.search(r"not found in \d", err)
    err = cli("fs", *master, "rm", "/runs/7/pipe.bin").stderr.decode()
    assert "rm: /runs/7: no such file or directory" in err, err      # the first component missing
    err = cli("fs", *master, "mv", "/runs/6/a", "/runs/6/b").stderr.decode()
    assert "mv: /runs/6/a: no such file or directory" in err, err
    err = cli("fs", *master, "policy", "/l2cache", "--class", "cache").stderr.decode()
    assert "policy: /l2cache: no such file or directory; create it first: fs mkdir -p /l2cache" in err, err


def test_report_json_integers_are_numbers(cluster1: Cluster) -> None:
    cluster1.wait_for_live_workers(1)
    result = cli("report", "--master", cluster1.master_address, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    [worker] = report["workers"]
    for value in (report["epoch"], report["capacity"], report["files"], report["directories"],
                  worker["capacity"], worker["used"], worker["lastHeartbeatMs"], worker["reserveBytes"],
                  report["replication"]["underReplicated"], report["replication"]["lost"]):
        assert type(value) is int, report
    assert worker["capacity"] > 0 and worker["lastHeartbeatMs"] > 0


def _report_on_a_terminal(cluster: Cluster, columns: int) -> list[str]:
    """`report` as a `columns`-wide terminal shows it (a pty, so rich sizes to COLUMNS)."""
    command = " ".join([CURVINE, "report", "--master", cluster.master_address])
    result = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}, check=False)
    assert result.returncode == 0, result.stderr
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stdout).replace("\r", "")
    return plain.splitlines()


def test_report_table_fits_100_columns_with_health_and_node(cluster3: Cluster) -> None:
    cluster3.wait_for_live_workers(3)
    ids = [w.field("id") for w in cluster3.workers if w is not None]
    lines = _report_on_a_terminal(cluster3, 100)
    table_lines = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table_lines and all(len(line) <= 100 for line in table_lines), "\n".join(lines)
    assert max(len(line) for line in table_lines) > 80, "\n".join(lines)   # sized to the 100 columns
    headers = " ".join(line for line in table_lines if line.startswith("┃"))
    for name in ("health", "node", "address", "used / capacity", "heartbeat", "hit rate", "disk reserve",
                 "lm://", "metrics"):
        assert f" {name} " in headers, headers    # every column, none shrunk to an ellipsis
    assert "…" not in "\n".join(table_lines)
    for index, worker_id in enumerate(ids):    # each worker's row shows its health and its node whole
        row = next(line for line in table_lines if worker_id in line and " live " in line)
        assert f" node{index} " in row, row
    wide = _report_on_a_terminal(cluster3, 240)
    assert sum(1 for line in wide if line.startswith("┃") and " health " in line and " metrics " in line) == 1
