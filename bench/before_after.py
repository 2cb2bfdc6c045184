"""Prints the bench kv before/after table of docs/benchmarks.md ("Before and after the restructuring")
from bench/results/kv-before-after.json: per size and op, the median over runs of each run's ratio
to its same-run Reno raw pair, and the median client+server CPU per GB moved. The runs are
`bench kv --quick` results, alternately in a checkout of each side (the fuse rows beside them:
bench/fuse_before_after.py).

    .venv/bin/python -m bench.before_after [FILE]
"""
from __future__ import annotations

import json
import statistics
import sys
from typing import Any

OPS = ("get", "put", "get_local")


def rows(document: dict[str, Any]) -> dict[tuple[int, str], dict[str, dict[str, list[float]]]]:
    table: dict[tuple[int, str], dict[str, dict[str, list[float]]]] = {}
    for side in ("before", "after"):
        for run in document["runs"][side]:
            for result in run:
                for op in OPS:
                    if op not in result:
                        continue
                    entry = table.setdefault((result["size_mib"], op), {}).setdefault(side, {"ratio": [], "cpu": []})
                    entry["ratio"].append(result[op]["vs"]["reno"]["ratio_median"])
                    cpu = result[op]["cpu"]["subject"]
                    entry["cpu"].append((cpu["client_cpu_s_per_gb"] + cpu["server_cpu_s_per_gb"]) * 1000)
    return table


def main(path: str = "bench/results/kv-before-after.json") -> None:
    with open(path) as f:
        table = rows(json.load(f))
    print("| MiB | op | KV / Reno pair, before | after | CPU ms/GB (client+server), before | after | after / before CPU |")
    print("|---|---|---|---|---|---|---|")
    for (size, op), sides in sorted(table.items()):
        before, after = sides["before"], sides["after"]
        cpu_before, cpu_after = statistics.median(before["cpu"]), statistics.median(after["cpu"])
        print(f"| {size} | {op} | {statistics.median(before['ratio']):.2f}x | {statistics.median(after['ratio']):.2f}x "
              f"| {cpu_before:.0f} | {cpu_after:.0f} | {cpu_after / cpu_before:.2f} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
