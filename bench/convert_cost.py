"""What one ReadDir page costs the mount beyond its bytes: parsing a 512-entry reply, and turning
it into core's values (rpc/convert.dir_page_from_pb), in microseconds per page, medians of
repeats; the master's side (domain -> protobuf -> bytes) next to it. The figure behind
docs/benchmarks.md notes:restructuring ("each page costs several ms").

    .venv/bin/python -m bench.convert_cost [--entries 512] [--repeats 9]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from curvine_py.core.domain import Attr, DirEntry, FileType, InodeId
from curvine_py.proto.curvine.v1 import master_pb2 as mpb
from curvine_py.rpc import convert


def page(entries: int) -> list[DirEntry]:
    return [DirEntry(f"file-{i:06d}", Attr(ino=InodeId(1000 + i), type=FileType.REGULAR, mode=0o644, uid=0, gid=0,
                                            size=i, nlink=1, atime_ns=i, mtime_ns=i, ctime_ns=i))
            for i in range(entries)]


def per_call_us(fn: object, loops: int, repeats: int) -> float:
    assert callable(fn)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--loops", type=int, default=20)
    args = parser.parse_args()
    entries = page(args.entries)
    wire = convert.readdir_reply(entries, more=True).SerializeToString()
    reply = mpb.ReadDirReply.FromString(wire)
    result = {
        "entries": args.entries,
        "parse_us": per_call_us(lambda: mpb.ReadDirReply.FromString(wire), args.loops, args.repeats),
        "to_domain_us": per_call_us(lambda: convert.dir_page_from_pb(reply), args.loops, args.repeats),
        "master_build_and_serialize_us": per_call_us(
            lambda: convert.readdir_reply(entries, more=True).SerializeToString(), args.loops, args.repeats),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
