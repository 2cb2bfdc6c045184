"""Large directories through the mount and through the library, for comparing checkouts:
`ls` of a 10k-entry directory (readdirplus pages of 512 from the master), `ls -l` (then an lstat
and an lgetxattr of security.selinux per name), that lgetxattr alone (of the first 2,000 names), a
`stat` of every name in name order (after the kernel's entries expired: the mount's hot-directory
prefetch, fuse/names.py, answers most of them from fetched pages), and the library's
`FileSystem.ls` of the same directory (readdir_all and a FileStatus per entry) as the baseline.
Wall time and the mount's and the master's CPU per entry (from /proc), every mount row after the
kernel's entries and attributes expired.

    .venv/bin/python -m bench.fuse_readdir ab OUT.json NAME=CHECKOUT NAME=CHECKOUT [--repeats 5] [--rows R,R]
    .venv/bin/python -m bench.fuse_readdir show OUT.json

`ab` starts one worker per checkout (PYTHONPATH=CHECKOUT, cwd CHECKOUT, this file's code;
bench/common.in_turns), each with its own cluster, mount and directory, all running at once, and
asks them for a sample of each row in turns, the order alternating, so both sides see the same load; it prints per side the
medians over the samples and the medians of the per-sample ratios to the first side. Whole runs
one after the other spread too much on a shared machine (one side's CPU per entry 0.8x-1.3x the
other's in rows the change does not touch). Uses only what both sides of the restructuring share
(Cluster, Mount, create_many, resolve, fs.ls; bench/fuse_rows' /proc helpers).
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
from collections.abc import Callable
from typing import Any

ROWS = ("mnt_ls", "mnt_ls_l", "mnt_stat_every_name", "mnt_selinux_xattr_every_name", "lib_ls")
XATTR_NAMES = 2_000
EXPIRE_S = 1.2          # the mount's entry and attribute timeouts are 1 s


def serve(entries: int) -> None:
    """ab's worker: for each row name read from stdin, one sample of it (JSON) on stdout."""
    from bench.fuse_rows import timed, tree
    from curvine_py.core.domain import FileType, NewNode
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster

    with tempfile.TemporaryDirectory(prefix="bench-fuse-readdir-") as tmp:
        root = pathlib.Path(tmp)
        with Cluster(root / "cluster", workers=1) as cluster:
            client = cluster.client()
            with Mount(cluster.master_address, root / "mnt", env={"CURVINE_FUSE_FAIL_FAST": "0"}) as mount:
                assert cluster.master is not None and mount.process is not None
                procs = {"mount": tree(mount.process.process.pid), "master": tree(cluster.master.process.pid)}
                top = client.master.create(NewNode(client.master.resolve("/").ino, "big", FileType.DIRECTORY,
                                                   0o755))
                names = [f"file-{i:06d}" for i in range(entries)]
                for start in range(0, entries, 250):
                    made = client.master.create_many([NewNode(top.ino, n, FileType.REGULAR, 0o644)
                                                      for n in names[start:start + 250]])
                    assert not [m for m in made if isinstance(m, Exception)], made
                big = mount.path / "big"
                paths = [big / n for n in names]

                def run(*argv: str, lines: int) -> Callable[[object], None]:
                    def listing(_: object) -> None:
                        listed = subprocess.run([*argv, str(big)], capture_output=True, text=True, check=True)
                        assert listed.stdout.count("\n") == lines
                    return listing

                def no_selinux_label(path: pathlib.Path) -> None:
                    try:
                        os.getxattr(path, "security.selinux", follow_symlinks=False)
                    except OSError as exc:     # what ls -l's lgetxattr gets for each name
                        assert exc.errno in (errno.ENODATA, errno.EOPNOTSUPP), exc
                    else:
                        raise AssertionError(f"{path} has a security.selinux label")

                def lib_ls(_: object) -> None:
                    assert len(client.fs.ls("/big")) == entries

                # row -> (what one call does, its items, entries per item)
                rows: dict[str, tuple[Callable[[Any], object], list[Any], int]] = {
                    "mnt_ls": (run("ls", lines=entries), [None], entries),
                    "mnt_ls_l": (run("ls", "-l", lines=entries + 1), [None], entries),   # "total" + a line each
                    "mnt_stat_every_name": (os.stat, paths, 1),
                    "mnt_selinux_xattr_every_name": (no_selinux_label, paths[:XATTR_NAMES], 1),
                    "lib_ls": (lib_ls, [None], entries),
                }
                print("ready", flush=True)
                for line in sys.stdin:
                    row = line.strip()
                    action, items, per_item = rows[row]
                    if row.startswith("mnt_"):
                        time.sleep(EXPIRE_S)
                    sample = timed(row, action, items, procs)
                    print(json.dumps(per_entry(sample, per_item)), flush=True)


def per_entry(row: dict[str, float], entries: int) -> dict[str, float]:
    """A row timed per listing, as rates and CPU per entry (and only those)."""
    keys = ("rate", "mount_cpu_us", "master_cpu_us")
    return {k: row[k] * entries if k == "rate" else row[k] / entries for k in keys}


def summary(samples: dict[str, dict[str, list[dict[str, float]]]], base: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, rows in samples.items():
        out[name] = {}
        for row, got in rows.items():
            medians = {k: statistics.median(s[k] for s in got) for k in got[0]}
            ratios = {f"{k}_ratio": statistics.median(s[k] / b[k] if b[k] else float("nan")
                                                      for s, b in zip(got, samples[base][row], strict=True))
                      for k in ("rate", "mount_cpu_us", "master_cpu_us")}
            out[name][row] = medians | ratios
    return out


def report(doc: dict[str, Any]) -> None:
    loads = doc["load_1min"]
    names = list(doc["sides"])
    base = names[0]
    print(f"{doc['repeats']} samples per row and side, load (1 min) {min(loads):.1f}-{max(loads):.1f}")
    print("| row | " + " | ".join(f"{n}: entries/s, mount / master CPU us per entry" for n in names) + " | " +
          " | ".join(f"{n} / {base}: rate, mount CPU, master CPU" for n in names[1:]) + " |")
    s = doc["summary"]
    for row in (row for row in ROWS if row in s[base]):
        cells = [f"{s[n][row]['rate']:,.0f}, {s[n][row]['mount_cpu_us']:.1f} / {s[n][row]['master_cpu_us']:.1f}"
                 for n in names]
        ratios = [f"{s[n][row]['rate_ratio']:.2f}, {s[n][row]['mount_cpu_us_ratio']:.2f}, "
                  f"{s[n][row]['master_cpu_us_ratio']:.2f}" for n in names[1:]]
        print(f"| {row} | " + " | ".join(cells + ratios) + " |")


def ab(out: str, sides: list[tuple[str, str]], repeats: int, entries: int, rows: tuple[str, ...] = ROWS) -> None:
    from bench.common import in_turns

    def write(samples: dict[str, dict[str, list[dict[str, float]]]], loads: list[float]) -> None:
        doc = {"entries": entries, "repeats": len(loads) - 1, "sides": dict(sides), "load_1min": loads,
               "samples": samples, "summary": summary(samples, sides[0][0])}
        pathlib.Path(out).write_text(json.dumps(doc, indent=1) + "\n")
        report(doc)

    in_turns([sys.executable, os.path.abspath(__file__), "serve", "--entries", str(entries)], sides, rows, repeats,
             json.loads, write)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["ab", "serve", "show"])
    p.add_argument("out", nargs="?")
    p.add_argument("sides", nargs="*", help="ab: NAME=CHECKOUT, the first is the baseline")
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=5, help="samples of each row per side")
    p.add_argument("--rows", default=",".join(ROWS), help="ab: the rows to sample, comma-separated")
    a = p.parse_args(argv)
    if a.mode == "serve":
        serve(a.entries)
    elif a.mode == "ab":
        if not a.out or len(a.sides) < 2 or not all("=" in s for s in a.sides):
            p.error("ab needs OUT.json and at least two NAME=CHECKOUT")
        rows = tuple(a.rows.split(","))
        if not set(rows) <= set(ROWS):
            p.error(f"--rows: of {', '.join(ROWS)}")
        ab(a.out, [(n, c) for n, c in (s.split("=", 1) for s in a.sides)], a.repeats, a.entries, rows)
    else:
        report(json.loads(pathlib.Path(a.out).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
