"""Python and C calls per operation in the mount process (or the master's: --role master), for comparing checkouts.
Calls do not depend on the load of the
machine, as rates and CPU times do, so two checkouts compare exactly on a busy box.

    .venv/bin/python -m bench.fuse_calls OUT.json NAME=CHECKOUT [NAME=CHECKOUT ...] [--files N] [--top K]
        [--role mount|master] [--row mnt_stat|mnt_unlink|lib_stat|lib_unlink]

Each side runs bench/fuse_rows.py's `one` (its own cluster and mount, FILES files x 2 repeats) with
bench/callcount/ on the mount's PYTHONPATH, whose sitecustomize counts every call by bench phase.
Printed per side: that process's Python and C calls per operation of each row (`stat` and
`unlink` through the mount, and through the library); then, against the first side, the K
functions whose calls per operation of --row moved most.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections import Counter

HERE = pathlib.Path(__file__).resolve().parent
ROWS = ("mnt_stat", "mnt_unlink", "lib_stat", "lib_unlink")
REPEATS = 2


def count(checkout: str, files: int, role: str) -> dict[str, dict[str, float]]:
    """Calls per operation by row and function in the `role` process of one checkout."""
    with tempfile.TemporaryDirectory(prefix="bench-fuse-calls-") as where:
        env = {**os.environ, "PYTHONPATH": f"{checkout}:{HERE / 'callcount'}", "CALLCOUNT_DIR": where,
               "STATGAP_PROF": where, "CALLCOUNT_ROLE": role}
        subprocess.run([sys.executable, str(HERE / "fuse_rows.py"), "one", os.path.join(where, "rows.json"),
                        "--files", str(files), "--repeats", str(REPEATS)], check=True, cwd=checkout, env=env)
        totals: dict[str, Counter[str]] = {row: Counter() for row in ROWS}
        for path in glob.glob(os.path.join(where, "counts-*.json")):
            for row, functions in json.loads(pathlib.Path(path).read_text()).items():
                if row in totals:
                    totals[row].update(functions)
    ops = files * REPEATS
    return {row: {fn: n / ops for fn, n in c.items()} for row, c in totals.items()}


def python_and_c(calls: dict[str, float]) -> tuple[float, float]:
    c = sum(n for fn, n in calls.items() if fn.startswith("C:"))
    return sum(calls.values()) - c, c


def report(sides: dict[str, dict[str, dict[str, float]]], top: int, focus: str) -> None:
    for name, rows in sides.items():
        print(f"{name:>12}: " + "  ".join(
            "{} {:.1f} Python + {:.1f} C calls/op".format(row, *python_and_c(rows[row])) for row in ROWS))
    names = list(sides)
    base = sides[names[0]][focus]
    for other in names[1:]:
        calls = sides[other][focus]
        moved = {fn: calls.get(fn, 0.0) - base.get(fn, 0.0) for fn in set(base) | set(calls)}
        print(f"{focus}, {names[0]} -> {other}: the {top} functions that moved most (calls per operation)")
        for fn, delta in sorted(moved.items(), key=lambda kv: -abs(kv[1]))[:top]:
            print(f"  {delta:+7.2f}  {base.get(fn, 0.0):6.2f} -> {calls.get(fn, 0.0):6.2f}  {fn}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("sides", nargs="+", help="NAME=CHECKOUT")
    p.add_argument("--files", type=int, default=500)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--role", choices=["mount", "master"], default="mount")
    p.add_argument("--row", choices=ROWS, default="mnt_stat")
    a = p.parse_args(argv)
    sides = {}
    for side in a.sides:
        name, checkout = side.split("=", 1)
        sides[name] = count(os.path.abspath(checkout), a.files, a.role)
    pathlib.Path(a.out).write_text(json.dumps({"files": a.files, "repeats": REPEATS, "role": a.role,
                                               "sides": sides}) + "\n")
    report(sides, a.top, a.row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
