"""bench/fuse_cold.py's report: medians and per-repeat ratios to the first checkout, short reads
counted (never hidden), and a bad --checkout is a usage error before anything starts."""
from __future__ import annotations

import pytest

from bench import fuse_cold


def sample(gbps: float, mount_ms: float, short: bool = False) -> dict[str, float]:
    return {"gbps": gbps, "mount_ms": mount_ms, "worker_ms": 0.2, "reader_ms": 0.3, "fuse_reads": 256.0,
            "block_reads": 66.0, "short": float(short)}


def payload() -> dict[str, object]:
    samples = {pattern: {"before": [sample(1.0, 1.0), sample(0.5, 2.0, short=True), sample(0.8, 1.2)],
                         "after": [sample(1.5, 0.5), sample(0.5, 1.0), sample(1.2, 0.9)]}
               for pattern in fuse_cold.PATTERNS}
    return {"machine": {"date": "d", "cpus": 2, "cpu": "c", "memory_gib": 1, "kernel": "k", "python": "p",
                        "commit": "abc", "loadavg_at_start": [1.0]},
            "parameters": {"checkouts": {"before": "/b", "after": "/a"}, "size_mib": 256, "files": 8, "repeats": 3},
            "samples": samples, "summary": fuse_cold.summarize(samples)}


def test_ratios_are_per_repeat_against_the_first_checkout_and_short_reads_are_counted() -> None:
    summary = payload()["summary"]["seq"]     # type: ignore[index]
    assert summary["before"]["gbps_ratio"] == 1.0 and summary["before"]["short_reads"] == 1
    assert summary["after"]["gbps_ratio"] == pytest.approx(1.5)      # per repeat 1.5, 1.0, 1.5
    assert summary["after"]["mount_ms_ratio"] == pytest.approx(0.5)  # per repeat 0.5, 0.5, 0.75
    assert summary["after"]["mount_ms"] == 0.9 and summary["after"]["short_reads"] == 0
    text = fuse_cold.render(payload())
    assert "| sequential read, 1 MiB reads | before | 0.80 | 1.00x | 1.200 | 1.00x |" in text
    assert "| 1 of 3 |" in text and "| 0 of 3 |" in text


@pytest.mark.parametrize("spec", ["nodir", "x=/nonexistent", "=/tmp"])
def test_a_bad_checkout_is_a_usage_error(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fuse_cold.main(["--checkout", spec, "--no-write"])
    assert exc.value.code == 2
    assert "--checkout" in capsys.readouterr().err
