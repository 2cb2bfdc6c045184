"""`curvine-py report` against a real cluster: the table and --json say what the cluster holds
(workers, usage, files, quotas, a lost worker), and --watch refreshes: in place on a pty (rich
Live), one snapshot after another in a pipe."""
from __future__ import annotations

import json
import os
import pathlib
import pty
import select
import signal
import subprocess
import time
import urllib.request

from curvine_py.client import CurvineClient
from curvine_py.procs import curvine_command
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli


def report_json(cluster: Cluster) -> dict:   # type: ignore[type-arg]
    result = cli("report", "--master", cluster.master_address, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)   # type: ignore[no-any-return]


def worker_ids(cluster: Cluster) -> list[str]:
    return [w.field("id") for w in cluster.workers if w is not None]


def test_report_and_json_match_the_cluster(cluster3: Cluster) -> None:
    cluster3.wait_for_live_workers(3)
    data = random_bytes(5 << 20, seed=3)
    with CurvineClient(cluster3.master_address) as client:
        client.fs.mkdir("/models", parents=True)
        client.fs.set_quota("/models", max_bytes=64 << 20, max_inodes=10)
        with client.fs.open("/models/w.bin", "wb") as handle:
            handle.write(data)
        client.kv.put("chunk-0", b"kv" * 1000)
        assert client.kv.get("chunk-0") == b"kv" * 1000 and client.kv.get("chunk-9") is None   # 1 hit, 1 miss
    ids = worker_ids(cluster3)
    def settled() -> bool:
        workers = report_json(cluster3)["workers"]
        return (sum(int(w["used"]) for w in workers) >= len(data)
                and sum(int(w["hits"]) + int(w["misses"]) for w in workers) >= 2)
    wait_until(settled, 15, "the heartbeats report the usage and the lookups")
    report = report_json(cluster3)
    assert sorted(w["workerId"] for w in report["workers"]) == sorted(ids)
    assert all(w["live"] for w in report["workers"])
    assert int(report["files"]) == 1 and int(report["capacity"]) == sum(int(w["capacity"]) for w in report["workers"])
    assert sum(int(w["objects"]) for w in report["workers"]) == 1
    [quota] = report["quotas"]
    assert quota["path"] == "/models" and int(quota["usedBytes"]) == len(data) and int(quota["maxBytes"]) == 64 << 20

    text = cli("report", "--master", cluster3.master_address).stdout.decode()
    assert "3 live / 3" in text and "files 1 " in text
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│") and "127.0.0.1:" in line}
    assert sorted(rows) == sorted(ids) and all("│ live " in row for row in rows.values())
    by_id = {w["workerId"]: w for w in report["workers"]}
    for worker_id, row in rows.items():   # each row's hit rate is its worker's reported counters
        hits, misses = int(by_id[worker_id]["hits"]), int(by_id[worker_id]["misses"])
        assert (f"{hits / (hits + misses):.1%} of {hits + misses}" if hits + misses else " - ") in row
    assert sum(int(w["hits"]) for w in report["workers"]) >= 1 and sum(int(w["misses"]) for w in report["workers"]) >= 1
    assert "0 under-replicated" in text and "0 lost" in text
    quota_row = next(line for line in text.splitlines() if "/models" in line)
    assert "5.0 MiB / 64.0 MiB" in quota_row and "1 / 10" in quota_row

    cluster3.kill_worker(2)   # its lease runs out: the report shows it lost, and the blocks it held
    wait_until(lambda: sum(1 for w in report_json(cluster3)["workers"] if not w["live"]) == 1, 30, "worker 2 is lost")
    text = cli("report", "--master", cluster3.master_address).stdout.decode()
    assert "2 live / 3" in text
    lost = next(line for line in text.splitlines() if ids[2] in line)
    assert "LOST" in lost


# A watch that does not stop on Ctrl-C is aborted and its threads' stacks shown (faulthandler).
WATCH_ENV = {**os.environ, "PYTHONFAULTHANDLER": "1"}
STOP_S = 30.0   # CI once saw a 10 s wait for the exit run out; what it was stuck in was not shown


def test_watch_in_a_pipe_prints_one_snapshot_after_another(cluster1: Cluster) -> None:
    cluster1.wait_for_live_workers(1)
    proc = subprocess.Popen(curvine_command("report", "--master", cluster1.master_address, "--json", "--watch", "0.2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=WATCH_ENV)
    assert proc.stdout is not None
    try:
        snapshots = [json.loads(proc.stdout.readline()) for _ in range(3)]   # one JSON document a line
        assert all(s["clusterId"] == snapshots[0]["clusterId"] and len(s["workers"]) == 1 for s in snapshots)
    finally:
        proc.send_signal(signal.SIGINT)
        try:   # read on while it stops: a writer blocked on a full pipe would never exit
            proc.communicate(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"report --watch ignored Ctrl-C; its stacks:\n{err.decode(errors='replace')}")
        assert proc.returncode == 0


def test_watch_on_a_terminal_refreshes_in_place(cluster1: Cluster) -> None:
    cluster1.wait_for_live_workers(1)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(curvine_command("report", "--master", cluster1.master_address, "--watch", "0.2"),
                            stdout=follower, stderr=follower, env={**WATCH_ENV, "COLUMNS": "220", "TERM": "xterm"})
    os.close(follower)
    output = b""

    def read_for(seconds: float) -> bytes:
        """What the terminal shows within `seconds` (or until the process's side closes)."""
        got, deadline = b"", time.monotonic() + seconds
        while time.monotonic() < deadline:
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    got += os.read(leader, 65536)
                except OSError:   # EIO: every writer of the terminal is gone
                    break
            elif proc.poll() is not None:
                break
        return got

    try:
        deadline = time.monotonic() + 30
        while output.count(b"1 live / 1") < 3 and time.monotonic() < deadline:
            output += read_for(1)
        assert output.count(b"1 live / 1") >= 3, output
        assert b"\x1b[2K" in output and b"\x1b[1A" in output, "rich Live erases and rewrites its lines"
    finally:
        proc.send_signal(signal.SIGINT)
        # Read on while it stops (a writer blocked on a full terminal would never exit), until its
        # side of the terminal closes; the exit itself may come a little after that (EIO first).
        unread = read_for(STOP_S)
        try:
            code = proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            stacks = (unread + read_for(10)).decode(errors="replace")
            os.close(leader)
            raise AssertionError(f"report --watch ignored Ctrl-C; its stacks:\n{stacks}") from None
        os.close(leader)
        assert code == 0


def test_watch_needs_a_positive_interval(cluster1: Cluster) -> None:
    result = cli("report", "--master", cluster1.master_address, "--watch", "0")
    assert result.returncode == 2 and b"more than 0" in result.stderr


def _port(field: str) -> int:
    return int(field.rsplit(":", 1)[1])


def test_metrics_ports_listed_in_the_report(tmp_path: pathlib.Path) -> None:
    """Each worker tells the master its /metrics port (registration and every heartbeat), the
    master adds its own /metrics and status ports: `report --json` lists them, the table shows
    them, each answers, a worker without one says off, and a restarted master has them again from
    the next heartbeat (they are not persisted)."""
    with Cluster(tmp_path, workers=2, master_args=["--metrics-port", "-1", "--status-port", "-1"]) as cluster:
        cluster.kill_worker(0)   # back with a /metrics port; worker 1 has none
        cluster.start_worker(0, extra=["--metrics-port", "-1"])
        cluster.wait_for_live_workers(2)
        master = cluster.master
        assert master is not None
        worker_port = _port(cluster.workers[0].field("metrics"))   # type: ignore[union-attr]
        report = report_json(cluster)
        assert report["metricsPort"] == _port(master.field("metrics"))
        assert report["statusPort"] == _port(master.field("status"))
        ports = {w["workerId"]: w["metricsPort"] for w in report["workers"]}
        assert ports == {cluster.worker_id(0): worker_port, cluster.worker_id(1): 0}
        for port, path in ((worker_port, "/metrics"), (report["metricsPort"], "/metrics"), (report["statusPort"], "/")):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
                assert answer.status == 200
        text = cli("report", "--master", cluster.master_address).stdout.decode()
        assert f"master metrics {report['metricsPort']}  status page {report['statusPort']}" in text
        rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│") and "127.0.0.1:" in line}
        assert rows[cluster.worker_id(0)].rstrip("│ ").endswith(str(worker_port))
        assert rows[cluster.worker_id(1)].rstrip("│ ").endswith("off")

        cluster.restart_master()
        wait_until(lambda: {w["workerId"]: w["metricsPort"] for w in report_json(cluster)["workers"]} == ports,
                   15, "the heartbeats bring the metrics ports back")
