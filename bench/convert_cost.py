"""What one ReadDir page costs beyond its bytes, in microseconds per page, medians of repeats.
The mount's side: parsing a 512-entry reply; turning it into core's values
(rpc/convert.dir_page_from_pb); that plus reading every entry's attributes, as a listing does
(`listing`: with eager=True where the checkout has it, as fuse/readdir.py asks;
`default_all_attrs`: without); the conversion plus filling the name cache and serving a tenth of
its names, as a hot-directory prefetch that pays does (fuse/names.py), or all of them (a stat
of every name, the worst case for building an Attr on first read). The master's: the store's
readdir from SQLite (rows -> core's values); domain -> protobuf -> bytes; and, for scale, as many
lookup/getattr replies (an AttrReply each).

    .venv/bin/python -m bench.convert_cost [--entries 512] [--repeats 9]
    .venv/bin/python -m bench.convert_cost ab OUT.json NAME=CHECKOUT NAME=CHECKOUT [--repeats 31]

`ab` starts one worker per checkout (PYTHONPATH=CHECKOUT, this file's code; bench/common.in_turns) and asks them for a
sample of each row in turns, the order alternating, so both see the same load; it prints per side
the median (and min) over the samples and the median of the per-sample ratios to the first side.
Only the API both sides share is used (DirEntry(name, attr), dir_page_from_pb,
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
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROWS = ("parse_us", "to_domain_us", "listing_us", "default_all_attrs_us", "name_cache_page_us", "name_cache_all_served_us",
        "master_store_readdir_us", "master_build_and_serialize_us", "master_attr_replies_us")


def per_call_us(fn: Callable[[], object], loops: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def workloads(entries: int) -> tuple[dict[str, Callable[[], object]], Callable[[], None]]:
    """Each row's work (one call = one page), and what closes its store."""
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

    tenth = [entry.name for entry in page[::10]]    # a page that pays serves a tenth of its names
    every = [entry.name for entry in page]           # a stat of every name in order: all of them

    def name_cache_page(served: list[str]) -> None:
        cache = NameCache(60.0)
        cache.fill(7, convert.dir_page_from_pb(reply).entries, cache.generation)
        for name in served:
            cache.get(7, name)

    tmp = tempfile.TemporaryDirectory()
    ns = Namespace(str(pathlib.Path(tmp.name) / "meta.db"))
    for entry in page:
        ns.create(ROOT_INO, entry.name, FileType.REGULAR)

    def close() -> None:
        ns.close()
        tmp.cleanup()

    return {
        "parse_us": lambda: mpb.ReadDirReply.FromString(wire),
        "to_domain_us": lambda: convert.dir_page_from_pb(reply),
        "listing_us": lambda: every_attr(listing_page),
        "default_all_attrs_us": lambda: every_attr(convert.dir_page_from_pb),
        "name_cache_page_us": lambda: name_cache_page(tenth),
        "name_cache_all_served_us": lambda: name_cache_page(every),
        "master_store_readdir_us": lambda: ns.readdir(ROOT_INO, "", entries),
        "master_build_and_serialize_us": lambda: convert.readdir_reply(page, more=True).SerializeToString(),
        "master_attr_replies_us": lambda: [convert.attr_reply(e.attr).SerializeToString() for e in page],
    }, close


def measure(entries: int, loops: int, repeats: int) -> dict[str, float]:
    rows, close = workloads(entries)
    try:
        return {row: per_call_us(rows[row], loops, repeats) for row in ROWS}
    finally:
        close()


def serve(entries: int, loops: int) -> None:
    """ab's worker: for each row name read from stdin, one sample of it (us per page) on stdout."""
    rows, close = workloads(entries)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            print(per_call_us(rows[line.strip()], loops, 1), flush=True)
    finally:
        close()


def ab(out: str, sides: list[tuple[str, str]], repeats: int, entries: int, loops: int) -> None:
    """One worker per checkout, asked for a sample of each row in turns (the order alternating),
    so both sides see the same load within a fraction of a second; ratios are the medians of the
    per-sample ratios to the first side."""
    from bench.common import in_turns
    samples, loads = in_turns([sys.executable, os.path.abspath(__file__), "serve", "--entries", str(entries),
                               "--loops", str(loops)], sides, ROWS, repeats, float)
    base = sides[0][0]
    summary = {name: {row: {"median": statistics.median(samples[name][row]), "min": min(samples[name][row]),
                            "ratio": statistics.median(x / y for x, y in zip(samples[name][row], samples[base][row],
                                                                             strict=True))}
                      for row in ROWS} for name, _ in sides}
    report = {"sides": dict(sides), "entries": entries, "loops": loops, "repeats": repeats, "load_1min": loads,
              "samples": samples, "summary": summary}
    pathlib.Path(out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"load (1 min): {min(loads):.1f}-{max(loads):.1f}")
    others = [name for name, _ in sides[1:]]
    print("| row | " + " | ".join(f"{name}: median (min)" for name, _ in sides) + " | " +
          " | ".join(f"{name} / {base}" for name in others) + " |")
    for row in ROWS:
        cells = [f"{summary[name][row]['median']:,.0f} ({summary[name][row]['min']:,.0f})" for name, _ in sides]
        print(f"| {row} | " + " | ".join(cells + [f"{summary[name][row]['ratio']:.2f}" for name in others]) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="one", choices=("one", "ab", "serve"))
    parser.add_argument("out", nargs="?", help="ab: the JSON file to write")
    parser.add_argument("sides", nargs="*", help="ab: NAME=CHECKOUT, the first is the baseline")
    parser.add_argument("--entries", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9, help="samples of each row (ab: per side)")
    parser.add_argument("--loops", type=int, default=20, help="pages per sample")
    args = parser.parse_args()
    if args.mode == "ab":
        if not args.out or len(args.sides) < 2 or not all("=" in s for s in args.sides):
            parser.error("ab needs OUT.json and at least two NAME=CHECKOUT")
        ab(args.out, [(name, tree) for name, tree in (s.split("=", 1) for s in args.sides)], args.repeats,
           args.entries, args.loops)
    elif args.mode == "serve":
        serve(args.entries, args.loops)
    else:
        print(json.dumps(measure(args.entries, args.loops, args.repeats), indent=1))


if __name__ == "__main__":
    main()
