"""The soak of bench/soak.py, shortened for CI (issue 11, "Load"): 8 clients in 2 driver processes
of mixed KV put/get/exists and file create/read/rename/unlink against 1 master + 3 workers for
about 20 s. Every byte read is verified; the run must end with 0 errors, 0 mismatches, every daemon
alive and no daemon's RSS more than 10% above its level after the warm-up. The full run (64 clients,
10 minutes) is `python -m bench.soak`; its numbers are in bench/results/soak.json."""
from __future__ import annotations

import pathlib

from bench.soak import WEIGHTS, SoakParams, run

PARAMS = SoakParams(clients=8, duration_s=20.0, warmup_s=8.0, procs=2, rss_interval_s=1.0)


def test_a_short_soak_has_no_errors_no_mismatches_and_flat_memory(tmp_path: pathlib.Path) -> None:
    result = run(PARAMS, tmp_path)
    assert result["errors"] == 0, result["error_samples"]
    assert result["mismatches"] == 0, result["mismatch_samples"]
    assert all(result["daemons_alive_at_end"].values()), result["daemons_alive_at_end"]
    # every operation of the mix ran, and the final verification read what the clients still held
    ran = {op: result["ops"][op]["count"] for op in (*WEIGHTS, "verify_file", "verify_key")}
    assert all(ran.values()), ran
    assert result["bytes_read"] > 0 and result["bytes_written"] > 0
    assert set(result["rss"]) == {"master", "worker0", "worker1", "worker2"}
    for daemon, memory in result["rss"].items():
        assert memory["ok"], f"{daemon}: RSS {memory}"
