"""observe/logs.py: the one logging setup of every role, as text and as JSON lines."""
from __future__ import annotations

import json
import logging

import pytest

from curvine_py.observe import logs


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
