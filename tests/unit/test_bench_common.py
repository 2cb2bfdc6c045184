"""bench/common.machine(): the load average it labels "at start" is the benchmark process's start,
not whatever the machine carries when a benchmark calls it after its measurements."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import common


def test_machine_reports_the_load_average_taken_when_the_benchmark_started(monkeypatch: pytest.MonkeyPatch) -> None:
    start = tuple(round(x, 2) for x in common.LOADAVG_AT_START)
    monkeypatch.setattr(os, "getloadavg", lambda: (42.0, 41.0, 40.0))
    info = common.machine()
    assert tuple(info["loadavg_at_start"]) == start
    assert info["loadavg_now"] == [42.0, 41.0, 40.0]
    assert info["date"] == common.STARTED_AT.isoformat(timespec="seconds")
    assert "load average at start " + str(start[0]) in common.machine_line(info)


def test_the_start_is_taken_at_import() -> None:
    code = ("import os; os.getloadavg = lambda: (7.0, 7.0, 7.0); from bench import common; "
            "os.getloadavg = lambda: (9.0, 9.0, 9.0); print(common.machine()['loadavg_at_start'][0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=common.REPO, env={**os.environ, "PYTHONPATH": str(common.REPO)})
    assert out.stdout.strip() == "7.0"
