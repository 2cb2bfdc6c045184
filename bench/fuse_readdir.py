"""Large directories through the mount and through the library, for comparing checkouts (issue
9: the cost of a ReadDir page since the domain-type layer, docs/benchmarks.md notes:restructuring):
`ls` of a 10k-entry directory (readdirplus pages of 512 from the master), `ls -l` (then an lstat
and an lgetxattr of security.selinux per name), that lgetxattr of every name alone, a `stat` of
every name in name order (after the kernel's entries expired: the mount's
hot-directory prefetch, fuse/names.py, answers most of them from fetched pages), and the
library's `FileSystem.ls` of the same directory (readdir_all and a FileStatus per entry) as the
baseline. Wall time and the mount's and the master's CPU per row (from /proc).

    PYTHONPATH=CHECKOUT .venv/bin/python bench/fuse_readdir.py one OUT.json [--entries N] [--repeats R]
    .venv/bin/python bench/fuse_readdir.py ab OUT.json NAME=CHECKOUT NAME=CHECKOUT [--rounds K]

`ab` runs `one` for each checkout in turn (its own cluster and mount), K rounds, the order
alternating, and prints per side the medians over every repeat of every round. Uses only what
both sides of the restructuring share (Cluster, Mount, create_many, resolve, fs.ls; bench/fuse_rows'
/proc helpers).
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROWS = ("mnt_ls", "mnt_ls_l", "mnt_stat_every_name", "mnt_selinux_xattr_every_name", "lib_ls")


def one(out: str, entries: int, repeats: int) -> None:
    from bench.fuse_rows import timed, tree
    from curvine_py.core.domain import FileType, NewNode
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster

    results: dict[str, list[dict[str, float]]] = {row: [] for row in ROWS}
    with tempfile.TemporaryDirectory(prefix="bench-fuse-readdir-") as tmp:
        root = pathlib.Path(tmp)
        with Cluster(root / "cluster", workers=1) as cluster:
            client = cluster.client()
            with Mount(cluster.master_address, root / "mnt", env={"CURVINE_FUSE_FAIL_FAST": "0"}) as mount:
                assert cluster.master is not None and mount.process is not None
                procs = {"mount": tree(mount.process.process.pid), "master": tree(cluster.master.process.pid),
                         "bench": [os.getpid()]}
                top = client.master.create(NewNode(client.master.resolve("/").ino, "big", FileType.DIRECTORY,
                                                   0o755))
                names = [f"file-{i:06d}" for i in range(entries)]
                for start in range(0, entries, 250):
                    made = client.master.create_many([NewNode(top.ino, n, FileType.REGULAR, 0o644)
                                                      for n in names[start:start + 250]])
                    assert not [m for m in made if isinstance(m, Exception)], made
                big = mount.path / "big"
                paths = [big / n for n in names]

                def ls_l(_: object) -> None:
                    listed = subprocess.run(["ls", "-l", str(big)], capture_output=True, text=True, check=True)
                    assert listed.stdout.count("\n") == entries + 1          # "total" and a line each

                def ls(_: object) -> None:
                    listed = subprocess.run(["ls", str(big)], capture_output=True, text=True, check=True)
                    assert listed.stdout.count("\n") == entries

                def no_selinux_label(path: pathlib.Path) -> None:
                    try:
                        os.getxattr(path, "security.selinux", follow_symlinks=False)
                    except OSError as exc:     # what ls -l's lgetxattr gets for each name
                        assert exc.errno in (errno.ENODATA, errno.EOPNOTSUPP), exc
                    else:
                        raise AssertionError(f"{path} has a security.selinux label")

                def lib_ls(_: object) -> None:
                    assert len(client.fs.ls("/big")) == entries

                for _ in range(repeats):
                    time.sleep(1.2)             # the kernel's entries and attributes expire
                    results["mnt_ls"].append(per_entry(timed("mnt_ls", ls, [None], procs), entries))
                    time.sleep(1.2)
                    results["mnt_ls_l"].append(per_entry(timed("mnt_ls_l", ls_l, [None], procs), entries))
                    time.sleep(1.2)
                    results["mnt_stat_every_name"].append(timed("mnt_stat_every_name", os.stat, paths, procs))
                    results["mnt_selinux_xattr_every_name"].append(
                        timed("mnt_selinux_xattr_every_name", no_selinux_label, paths, procs))
                    results["lib_ls"].append(per_entry(timed("lib_ls", lib_ls, [None], procs), entries))
    pathlib.Path(out).write_text(json.dumps(results) + "\n")


def per_entry(row: dict[str, float], entries: int) -> dict[str, float]:
    """A row timed once per listing, as rates and CPU per entry."""
    return {k: v * entries if k == "rate" else v / entries for k, v in row.items()}


def summarise(side: list[dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    out = {}
    for row in ROWS:
        samples = [s for run in side for s in run[row]]
        keys = sorted({k for s in samples for k in s})
        out[row] = {k: statistics.median(s.get(k, 0.0) for s in samples) for k in keys}
    return out


def report(runs: dict[str, list[Any]], loads: list[float]) -> None:
    print(f"after {len(loads)} round(s), load (1 min) after each: {', '.join(f'{x:.1f}' for x in loads)}")
    print("| row | side | entries/s | mount CPU us/entry | master CPU us/entry |")
    for row in ROWS:
        for name, side in runs.items():
            s = summarise(side)[row]
            print(f"| {row} | {name} | {s['rate']:,.0f} | {s['mount_cpu_us']:.1f} | {s['master_cpu_us']:.1f} |",
                  flush=True)


def ab(out: str, sides: list[str], rounds: int, entries: int, repeats: int) -> None:
    named = [s.split("=", 1) for s in sides]
    runs: dict[str, list[Any]] = {name: [] for name, _ in named}
    loads = []
    for r in range(rounds):
        order = named if r % 2 == 0 else named[::-1]
        for name, checkout in order:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run([sys.executable, os.path.abspath(__file__), "one", f.name, "--entries", str(entries),
                                "--repeats", str(repeats)], check=True, cwd=checkout,
                               env={**os.environ, "PYTHONPATH": checkout})
                runs[name].append(json.loads(pathlib.Path(f.name).read_text()))
        loads.append(os.getloadavg()[0])
        report(runs, loads)
        pathlib.Path(out).write_text(json.dumps({"entries": entries, "repeats": repeats, "sides": dict(named),
                                                 "load_1min": loads, "runs": runs}) + "\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["one", "ab", "show"])
    p.add_argument("out")
    p.add_argument("sides", nargs="*")
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    if a.mode == "one":
        one(a.out, a.entries, a.repeats)
    elif a.mode == "ab":
        ab(a.out, a.sides, a.rounds, a.entries, a.repeats)
    else:
        doc = json.loads(pathlib.Path(a.out).read_text())
        report(doc["runs"], doc["load_1min"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
