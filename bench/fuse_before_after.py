"""The restructuring's before/after for `bench fuse` (issue 9): the sequential and metadata rows of
bench/fuse.py, run in two checkouts taking turns, each with its own code and its own bench/fuse.py.

    .venv/bin/python -m bench.fuse_before_after run OUT.json            # one run, in this checkout
    .venv/bin/python -m bench.fuse_before_after table [FILE]            # the doc's table from FILE

`run` uses only what both sides' `bench.fuse.Bench` have (mount_write/lib_write, mount_read/lib_read,
mount_meta/lib_meta) with the cluster and mount set up as their `main()` does, so each side is
measured by its own code: start it with PYTHONPATH set to that checkout. The ratio mount / library
is the number compared: both halves of it run on the same side, seconds apart. Raw runs are in
bench/results/fuse-before-after.json (`table` reads it), collected by hand as bench kv's are
(bench/before_after.py).

One difference between the sides' benches: 5695f2c's mount kept no page cache across opens, so its
sequential read crossed FUSE by itself; main's bench evicts the file's pages first (cold read), so
both rows are reads through FUSE.
"""
from __future__ import annotations

import json
import pathlib
import statistics
import sys
import tempfile
from typing import Any

MiB = 1 << 20
SIZE_MIB = 128
FILES = 500
REPEATS = 3
THREADS = (1, 4)
ROWS = (("seq_write_1m", "sequential write, 1 MiB writes"), ("seq_read_1m", "sequential read, 1 MiB reads"),
        *((f"{op}_t{t}", f"{op}, {t} thread(s)") for t in THREADS for op in ("create", "stat", "unlink")))
DEFAULT = "bench/results/fuse-before-after.json"


def run(out: str) -> None:
    from bench import common
    from bench import fuse as bench_fuse
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster

    info = common.machine()
    size = SIZE_MIB * MiB
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fuse-ba-") as tmp:
        root = pathlib.Path(tmp)
        node = "bench-client"                       # not the worker's: TCP, as bench fuse's default
        with Cluster(root / "cluster", workers=1, node_names=["bench-node"]) as cluster:
            client = cluster.client(node=node)
            with Mount(cluster.master_address, root / "mnt", args=["--node", node],
                       env={"CURVINE_FUSE_FAIL_FAST": "0"}) as mount:
                bench = bench_fuse.Bench(client, mount.path, node)
                results["seq_write_1m"] = common.paired(
                    lambda: bench.mount_write(bench._fresh("seq-mnt"), size),
                    lambda: bench.lib_write(bench._fresh("seq-lib"), size), REPEATS).summary()
                bench.mount_write("read-me", size)
                results["seq_read_1m"] = common.paired(
                    lambda: bench.mount_read("read-me"), lambda: bench.lib_read("read-me"), REPEATS).summary()
                for threads in THREADS:
                    runs = [(bench.lib_meta(FILES, threads), bench.mount_meta(FILES, threads, 1.0))
                            for _ in range(REPEATS)]
                    for op in ("create", "stat", "unlink"):
                        results[f"{op}_t{threads}"] = common.Paired(
                            tuple(m[op] for _, m in runs), tuple(lib[op] for lib, _ in runs)).summary()
    payload = {"machine": info, "config": {"size_mib": SIZE_MIB, "files": FILES, "repeats": REPEATS,
                                            "threads": list(THREADS)}, "results": results}
    pathlib.Path(out).write_text(json.dumps(payload, indent=1) + "\n")
    for key, label in ROWS:
        print(f"{label}: {results[key]['ratio_median']:.2f}x")


def table(document: dict[str, Any]) -> str:
    """Per row, the median over runs of each run's mount / library ratio, before and after, with
    the runs' range (the machine's noise, to judge the difference by)."""
    lines = ["| operation | mount / library, before (runs' range) | after (runs' range) | after / before |",
             "|---|---|---|---|"]
    for key, label in ROWS:
        sides = [[r["results"][key]["ratio_median"] for r in document["runs"][side]] for side in ("before", "after")]
        before, after = (statistics.median(v) for v in sides)
        cells = [f"{statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f})" for v in sides]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {after / before:.2f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) == 2:
        run(argv[1])
        return 0
    if argv[:1] == ["table"] and len(argv) <= 2:
        with open(argv[1] if len(argv) == 2 else DEFAULT) as f:
            print(table(json.load(f)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
