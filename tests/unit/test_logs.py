"""observe/logs.py: the one logging setup of every role, as text and as JSON lines."""
from __future__ import annotations

import json
import logging
import pathlib

import pytest

from curvine_py.observe import logs
from tests.harness import Cluster


def _emit(capsys: pytest.CaptureFixture[str], log_format: str, *, worker_id: str = "") -> str:
    tag = logs.setup_logging("worker", "node-a", "INFO", log_format)
    tag.worker_id = worker_id
    logger = logging.getLogger("curvine_py.test")
    logger.debug("not shown at INFO")
    try:
        raise OSError(28, "No space left on device")
    except OSError:
        logger.exception("write of block %x failed", 0xAB)
    return capsys.readouterr().err


def test_json_lines_carry_role_node_level_and_exception(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _emit(capsys, "json", worker_id="w-1").splitlines()
    assert len(lines) == 1    # the exception's traceback stays inside its one JSON object
    record = json.loads(lines[0])
    assert {k: record[k] for k in ("level", "role", "node", "logger", "msg", "worker_id")} == {
        "level": "ERROR", "role": "worker", "node": "node-a", "logger": "curvine_py.test",
        "msg": "write of block ab failed", "worker_id": "w-1"}
    assert record["ts"].endswith("Z") and "T" in record["ts"]
    assert "No space left on device" in record["exc"]


def test_text_lines_name_role_and_node(capsys: pytest.CaptureFixture[str]) -> None:
    out = _emit(capsys, "text")
    first = out.splitlines()[0]
    assert " ERROR worker node=node-a curvine_py.test: write of block ab failed" in first
    assert "worker=" not in first


def test_format_from_env_and_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(logs.ENV_FORMAT, "JSON")
    assert logs.parse_format(None) == "json"
    assert logs.parse_format("text") == "text"      # a flag beats the env
    with pytest.raises(ValueError, match="expected one of text, json"):
        logs.parse_format("yaml")


def test_master_and_worker_processes_log_json_lines(tmp_path: pathlib.Path) -> None:
    """A real master and worker with --log-format json: every stderr line is one JSON object."""
    with Cluster(tmp_path, workers=1, master_args=["--log-format", "json"],
                 worker_args=["--log-format", "json"]) as cluster:
        cluster.wait_for_live_workers(1)
        master, worker = cluster.master, cluster.workers[0]
        assert master is not None and worker is not None
        for process, role in ((master, "master"), (worker, "worker")):
            logged = [line for line in process.tail if line.startswith("{")]
            assert logged, list(process.tail)
            records = [json.loads(line) for line in logged]
            assert {r["role"] for r in records} == {role}
            assert all(r["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL") for r in records)
            # Nothing else but the ready line (stdout) shares the stream.
            assert all(line.startswith(("{", f"{role}=")) for line in process.tail), list(process.tail)
        assert any(r.get("worker_id") for r in map(json.loads, (x for x in worker.tail if x.startswith("{"))))
