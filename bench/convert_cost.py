"""What one ReadDir page costs beyond its bytes, in microseconds per page, medians of repeats:
the mount's side (parsing a 512-entry reply; turning it into core's values,
rpc/convert.dir_page_from_pb; that plus reading every entry's attributes, as a listing does
(`listing`: with eager=True where the checkout has it, as fuse/readdir.py asks; `default_all_attrs`:
without); the conversion plus filling the name cache and serving a tenth of its names, as a
hot-directory prefetch that pays does, fuse/names.py) and the master's (the store's readdir from SQLite, rows -> core's
values; domain -> protobuf -> bytes). The figures behind docs/benchmarks.md notes:restructuring.

    .venv/bin/python -m bench.convert_cost [--entries 512] [--repeats 9]
    .venv/bin/python bench/convert_cost.py ab OUT.json NAME=CHECKOUT NAME=CHECKOUT [--rounds K]

`ab` runs the measurement for each checkout in turn (PYTHONPATH=CHECKOUT, this file's code), K
rounds, the order alternating, and prints per side the median over rounds and the ratio to the
first side. Only the API both sides share is used (DirEntry(name, attr), dir_page_from_pb,
readdir_reply, NameCache.fill/get, Namespace.create/readdir).
"""
from __future__ import annotations

import argparse
import functools
import inspect
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

ROWS = ("parse_us", "to_domain_us", "listing_us", "default_all_attrs_us", "name_cache_page_us",
        "master_store_readdir_us", "master_build_and_serialize_us")


def per_call_us(fn: Callable[[], object], loops: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def measure(entries: int, loops: int, repeats: int) -> dict[str, float]:
    from curvine_py.core.domain import Attr, DirEntry, FileType, InodeId
    from curvine_py.core.posix import ROOT_INO
    from curvine_py.fuse.names import NameCache
    from curvine_py.master.namespace import Namespace
    from curvine_py.proto.curvine.v1 import master_pb2 as mpb
    from curvine_py.rpc import convert

    page = [DirEntry(f"file-{i:06d}", Attr(ino=InodeId(1000 + i), type=FileType.REGULAR, mode=0o644, uid=1000,
                                           gid=1000, size=i, nlink=1, atime_ns=i, mtime_ns=i, ctime_ns=i,
                                           block_size=4 << 20, stored_bytes=i))
            for i in range(entries)]
    wire = convert.readdir_reply(page, more=True).SerializeToString()
    reply = mpb.ReadDirReply.FromString(wire)

    # A listing reads every entry's attributes: with `eager` where the checkout has it (fuse/readdir.py
    # and readdir_all ask for it), by default otherwise.
    eager = "eager" in inspect.signature(convert.dir_page_from_pb).parameters
    listing_page = functools.partial(convert.dir_page_from_pb, eager=True) if eager else convert.dir_page_from_pb

    def every_attr(convert_page: Callable[[Any], Any]) -> None:
        for entry in convert_page(reply).entries:
            entry.attr  # noqa: B018 (the read is the work)

    served = [entry.name for entry in page[::10]]    # a page that pays serves a tenth of its names

    def name_cache_page() -> None:
        cache = NameCache(60.0)
        cache.fill(7, convert.dir_page_from_pb(reply).entries, cache.generation)
        for name in served:
            cache.get(7, name)

    with tempfile.TemporaryDirectory() as tmp:
        ns = Namespace(str(pathlib.Path(tmp) / "meta.db"))
        for entry in page:
            ns.create(ROOT_INO, entry.name, FileType.REGULAR)
        result = {
            "parse_us": per_call_us(lambda: mpb.ReadDirReply.FromString(wire), loops, repeats),
            "to_domain_us": per_call_us(lambda: convert.dir_page_from_pb(reply), loops, repeats),
            "listing_us": per_call_us(lambda: every_attr(listing_page), loops, repeats),
            "default_all_attrs_us": per_call_us(lambda: every_attr(convert.dir_page_from_pb), loops, repeats),
            "name_cache_page_us": per_call_us(name_cache_page, loops, repeats),
            "master_store_readdir_us": per_call_us(lambda: ns.readdir(ROOT_INO, "", entries), loops, repeats),
            "master_build_and_serialize_us": per_call_us(
                lambda: convert.readdir_reply(page, more=True).SerializeToString(), loops, repeats),
        }
        ns.close()
    return result


def ab(out: str, sides: list[tuple[str, str]], rounds: int, extra: list[str]) -> None:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    loads = []
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, checkout in order:
            env = dict(os.environ, PYTHONPATH=checkout)
            done = subprocess.run([sys.executable, __file__, "one", *extra], env=env, check=True,
                                  capture_output=True, text=True)
            runs[name].append(json.loads(done.stdout))
        loads.append(os.getloadavg()[0])
    base = sides[0][0]
    summary = {name: {row: statistics.median(run[row] for run in runs[name]) for row in ROWS} for name in runs}
    report: dict[str, Any] = {"sides": dict(sides), "rounds": rounds, "load_1min": loads, "runs": runs,
                              "median": summary}
    pathlib.Path(out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"load (1 min) after each round: {', '.join(f'{x:.1f}' for x in loads)}")
    print("| row | " + " | ".join(name for name, _ in sides) + " | " +
          " | ".join(f"{name} / {base}" for name, _ in sides[1:]) + " |")
    for row in ROWS:
        cells = [f"{summary[name][row]:,.0f}" for name, _ in sides]
        ratios = [f"{summary[name][row] / summary[base][row]:.2f}" for name, _ in sides[1:]]
        print(f"| {row} | " + " | ".join(cells + ratios) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="one", choices=("one", "ab"))
    parser.add_argument("out", nargs="?", help="ab: the JSON file to write")
    parser.add_argument("sides", nargs="*", help="ab: NAME=CHECKOUT, the first is the baseline")
    parser.add_argument("--entries", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.mode == "ab":
        if not args.out or len(args.sides) < 2 or not all("=" in s for s in args.sides):
            parser.error("ab needs OUT.json and at least two NAME=CHECKOUT")
        extra = ["--entries", str(args.entries), "--repeats", str(args.repeats), "--loops", str(args.loops)]
        ab(args.out, [(name, tree) for name, tree in (s.split("=", 1) for s in args.sides)], args.rounds, extra)
        return
    print(json.dumps(measure(args.entries, args.loops, args.repeats), indent=1))


if __name__ == "__main__":
    main()
